import { existsSync } from "node:fs";
import { createInterface } from "node:readline";
import { systemClock } from "../clock.ts";
import { createDb } from "../db/client.ts";
import { addStaff, disableStaff, listStaff, parseStaffRole, StaffInputError, setStaffRole } from "../staff/accounts.ts";

/**
 * npm run staff -- add <email> [--operator]     asks for the password (twice on a terminal; one line from a pipe)
 * npm run staff -- role <email> operator|staff  operators also see the queues (/admin/queues)
 * npm run staff -- disable <email>              the account can no longer sign in; its sessions end
 * npm run staff -- list
 * An entry point of its own: it reads DATABASE_URL only.
 */

const USAGE = "usage: npm run staff -- add <email> [--operator] | role <email> operator|staff | disable <email> | list";

async function readPassword(prompt: string): Promise<string> {
  if (!process.stdin.isTTY) {
    // From a pipe (scripts, tests): the first line, no prompt.
    const rl = createInterface({ input: process.stdin });
    const line = await new Promise<string>((resolve) => rl.once("line", resolve).once("close", () => resolve("")));
    rl.close();
    return line;
  }
  const rl = createInterface({ input: process.stdin, output: process.stdout, terminal: true });
  // Echo nothing while the password is typed.
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
      const password = await readPassword("Password: ");
      if (process.stdin.isTTY && (await readPassword("Again: ")) !== password) {
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

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
