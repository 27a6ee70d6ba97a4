import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runEvalCli } from "../src/eval/cli.ts";
import { OfflineClaude } from "./anthropic/offline.ts";
import { writeDemoNumbers } from "./business/shop.ts";
import { BUSINESS } from "./sandbox.ts";

/**
 * npm run eval -- FILE …: src/eval/cli.ts as a deployment runs it, with what a newcomer lacks
 * stood in, each said on the first lines: without ANTHROPIC_API_KEY the offline responder
 * answers (sim/anthropic/), and without PHONE_NUMBERS_FILE the demo shop's number is the one
 * configured (its knowledge and tools, sim/business/), so `npm run eval -- evals/shop.yaml`
 * runs on a fresh machine. Its tools are stubbed by the file: the shop is never started.
 */

async function main(): Promise<number> {
  if (existsSync(".env")) process.loadEnvFile(".env");
  const env: Record<string, string | undefined> = { ...process.env };
  let offline: OfflineClaude | undefined;
  let demoFiles: string | undefined;
  try {
    if (!env.ANTHROPIC_API_KEY) {
      offline = new OfflineClaude();
      await offline.start();
      Object.assign(env, { ANTHROPIC_API_KEY: "offline-eval", ANTHROPIC_BASE_URL: offline.url });
      console.log("No ANTHROPIC_API_KEY: the offline responder answers (sim/anthropic/), not Claude; rubrics are graded by word overlap.");
    }
    if (!env.PHONE_NUMBERS_FILE) {
      demoFiles = await mkdtemp(join(tmpdir(), "eval-demo-"));
      // Stubbed by the eval file: the address is never asked.
      env.PHONE_NUMBERS_FILE = await writeDemoNumbers(demoFiles, BUSINESS.phoneNumberId, "http://127.0.0.1:9", 5000);
      console.log(`No PHONE_NUMBERS_FILE: the demo shop's number ${BUSINESS.phoneNumberId} (sim/business/).`);
    }
    return await runEvalCli(process.argv.slice(2), env, {
      out: (line) => console.log(line),
      err: (line) => console.error(line),
      tty: process.stderr.isTTY === true,
      progress: (text) => process.stderr.write(`\r\u001b[K${text}`),
    });
  } finally {
    await offline?.stop();
    if (demoFiles) await rm(demoFiles, { recursive: true, force: true });
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error);
    process.exit(2);
  },
);
