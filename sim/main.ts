import { ConfigError } from "../src/config/config.ts";
import { DemoRefusal, ignoredVariables, refuseForeignGraph } from "./environment.ts";
import { type DemoSystem, startDemo } from "./system.ts";

/**
 * `npm run demo`: the whole system on this machine with a simulated Meta and, without
 * ANTHROPIC_API_KEY, an offline responder in Claude's place. It needs no `.env` and reads
 * none, never talks to Meta, starts Postgres and Redis when they are not running, and
 * prints where to chat with the bot and where the staff page is. src/main.ts (npm start)
 * knows nothing of it.
 */

const say = (line: string) => console.log(`[demo] ${line}`);

function banner(demo: DemoSystem): string {
  return [
    "",
    "  WhatsApp AI reply backend: demo sandbox",
    "",
    `  Chat with the bot:   ${demo.url}/demo`,
    `  Staff page:          ${demo.url}/admin`,
    `    sign in as ${demo.staff.email}, password ${demo.staff.password}`,
    "",
    `  Claude:  ${demo.claude === "anthropic" ? "the real Claude (ANTHROPIC_API_KEY is set)" : "the offline responder (set ANTHROPIC_API_KEY for the real Claude)"}`,
    "  Meta:    simulated on this machine; nothing is sent to WhatsApp",
    `  Data:    ${new URL(demo.config.databaseUrl).host}, schema ${new URL(demo.config.databaseUrl).searchParams.get("schema")}; Redis prefix ${demo.config.queuePrefix} (emptied at every start)`,
    "",
    "  Ctrl-C stops it.",
    "",
  ].join("\n");
}

async function main(): Promise<void> {
  // Before anything starts: a Graph API named in the environment is someone's real one.
  refuseForeignGraph(process.env);
  const ignored = ignoredVariables(process.env);
  if (ignored.length > 0) say(`not read by the demo (it composes its own environment): ${ignored.join(", ")}`);

  const demo = await startDemo({ env: process.env, say });
  console.log(banner(demo));

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    say(`${signal}: stopping`);
    const hardStop = setTimeout(() => process.exit(1), demo.config.shutdownTimeoutMs + 5000);
    hardStop.unref();
    await demo.close();
    say("stopped");
    process.exit(0);
  };
  process.on("SIGINT", () => void stop("SIGINT"));
  process.on("SIGTERM", () => void stop("SIGTERM"));
}

main().catch((error: unknown) => {
  if (error instanceof DemoRefusal || error instanceof ConfigError) {
    console.error(`[demo] ${error.message}`);
    process.exit(1);
  }
  console.error(error);
  process.exit(1);
});
