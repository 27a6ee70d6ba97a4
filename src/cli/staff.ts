import { existsSync } from "node:fs";
import { userInfo } from "node:os";
import { createInterface } from "node:readline";
import { systemClock } from "../clock.ts";
import { ConfigError } from "../config/config.ts";
import { eraseCustomer } from "../customer-data/erase.ts";
import { findContactByIdentity } from "../customer-data/find.ts";
import { createDb } from "../db/client.ts";
import { closeQueues, createQueues } from "../queue/queues.ts";
import { createWorkerRedis } from "../queue/redis.ts";
import { StoredAnswers } from "../queue/stored-answers.ts";
import { loadSettings, type Settings } from "../settings.ts";
import { addStaff, disableStaff, listStaff, parseStaffRole, StaffInputError, setStaffRole } from "../staff/accounts.ts";
import { contactLabel } from "../state/contacts.ts";

/**
 * npm run staff -- add <email> [--operator]     asks for the password (twice on a terminal; one line from a pipe)
 * npm run staff -- role <email> operator|staff  operators also see the queues (/admin/queues)
 * npm run staff -- disable <email>              the account can no longer sign in; its sessions end
 * npm run staff -- list
 * npm run staff -- erase <phone|@username|BSUID> [--yes]   a customer's data erased (asks for their label first)
 * An entry point of its own: it reads DATABASE_URL only, and for an erase the settings `npm start` reads.
 */

const USAGE = "usage: npm run staff -- add <email> [--operator] | role <email> operator|staff | disable <email> | list | erase <phone|@username|BSUID> [--yes]";

/** One line typed at the terminal after `prompt` (echoed unless `hidden`, as a password is), or a pipe's first line. */
async function readLine(prompt: string, { hidden }: { hidden: boolean }): Promise<string> {
  if (!process.stdin.isTTY) {
    // From a pipe (scripts, tests): the first line, no prompt.
    const rl = createInterface({ input: process.stdin });
    const line = await new Promise<string>((resolve) => rl.once("line", resolve).once("close", () => resolve("")));
    rl.close();
    return line;
  }
  const rl = createInterface({ input: process.stdin, output: process.stdout, terminal: true });
  // Echo nothing while a password is typed.
  if (hidden)
    (rl as unknown as { _writeToOutput: (s: string) => void })._writeToOutput = (s: string) => {
      if (s.includes(prompt)) process.stdout.write(prompt);
    };
  return new Promise((resolve) => {
    rl.question(prompt, (answer) => {
      rl.close();
      process.stdout.write("\n");
      resolve(answer);
    });
  });
}

async function main(): Promise<number> {
  if (existsSync(".env")) process.loadEnvFile(".env");
  const args = process.argv.slice(2);
  if (args[0] === "erase") return eraseCommand(args.slice(1));
  const operator = args.includes("--operator");
  const [command, address, roleName, ...extra] = args.filter((arg) => arg !== "--operator");
  const databaseUrl = process.env.DATABASE_URL;
  if (!databaseUrl) {
    console.error("DATABASE_URL is required");
    return 1;
  }
  const db = createDb(databaseUrl, { poolSize: 1 });
  try {
    if (command === "add" && address && roleName === undefined) {
      const password = await readLine("Password: ", { hidden: true });
      if (process.stdin.isTTY && (await readLine("Again: ", { hidden: true })) !== password) {
        console.error("the passwords differ; nothing was created");
        return 1;
      }
      const member = await addStaff(db, address, password, operator ? "operator" : "staff");
      console.log(`added ${member.email}${member.role === "operator" ? " (operator)" : ""}`);
    } else if (command === "role" && address && roleName !== undefined && extra.length === 0 && !operator) {
      const role = parseStaffRole(roleName);
      if (!(await setStaffRole(db, address, role))) {
        console.error(`no account for ${address}`);
        return 1;
      }
      console.log(`${address.trim().toLowerCase()} is now ${role}`);
    } else if (command === "disable" && address) {
      if (!(await disableStaff(db, address, systemClock.now()))) {
        console.error(`no account for ${address}`);
        return 1;
      }
      console.log(`disabled ${address.trim().toLowerCase()}`);
    } else if (command === "list") {
      for (const m of await listStaff(db)) {
        console.log(`${m.email}\t${m.disabledAt ? `disabled ${m.disabledAt.toISOString()}` : "active"}\t${m.role}\tsince ${m.createdAt.toISOString()}`);
      }
    } else {
      console.error(USAGE);
      return 2;
    }
    return 0;
  } catch (error) {
    if (error instanceof StaffInputError) {
      console.error(error.message);
      return 1;
    }
    throw error;
  } finally {
    await db.$disconnect();
  }
}

/** `erase <phone|@username|BSUID> [--yes]`: the same erase as POST /admin/contacts/:id/erase, audited as the person running it. */
async function eraseCommand(args: string[]): Promise<number> {
  const yes = args.includes("--yes");
  const identity = args.filter((arg) => arg !== "--yes");
  if (identity.length !== 1) {
    console.error(USAGE);
    return 2;
  }
  let settings: Settings;
  try {
    settings = loadSettings(process.env);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    console.error(error.message);
    return 1;
  }
  const db = createDb(settings.databaseUrl, { poolSize: 2 });
  const redis = createWorkerRedis(settings.redis);
  const queues = createQueues(redis, { prefix: settings.queuePrefix, attempts: settings.jobs.attempts });
  try {
    const contact = await findContactByIdentity(db, identity[0]!);
    if (!contact) {
      console.error(`no customer is known as ${identity[0]}`);
      return 1;
    }
    const label = contactLabel(contact);
    if (
      !yes &&
      (
        await readLine(`Erase everything held about ${label}${contact.name ? ` (${contact.name})` : ""}? Type ${label} to confirm: `, { hidden: false })
      ).trim() !== label
    ) {
      console.error("not confirmed; nothing was erased");
      return 1;
    }
    const erased = await eraseCustomer(
      {
        db,
        queues,
        clock: systemClock,
        logger: { info: () => undefined, warn: () => undefined },
        identityKey: settings.whatsapp.appSecret,
        storedAnswers: new StoredAnswers(redis, settings.queuePrefix),
      },
      contact.id,
      `cli:${userInfo().username}`,
    );
    if (!erased) {
      console.error(`no customer is known as ${identity[0]}`);
      return 1;
    }
    const rows = Object.entries(erased.erased).map(([kind, n]) => `${kind} ${n}`);
    const redisLine =
      erased.redis === "clean"
        ? `${erased.jobs} queued job(s) removed`
        : "some of their queued jobs could not be removed yet (Redis away, or one running): a worker's reconciler removes them once it can";
    console.log(`erased ${label}: ${rows.join(", ")}; ${redisLine}`);
    return 0;
  } finally {
    await closeQueues(queues);
    await Promise.allSettled([redis.quit(), db.$disconnect()]);
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
