import { existsSync } from "node:fs";
import { runEvalCli } from "../eval/cli.ts";

/**
 * The eval's entry point for a deployment (node dist/cli/eval.js FILE …): the environment, or
 * a local .env, as `npm start` reads it. `npm run eval` starts from sim/eval.ts, which stands
 * in an offline Claude and the demo shop's number when those are not configured.
 */
if (existsSync(".env")) process.loadEnvFile(".env");
runEvalCli(process.argv.slice(2), process.env, {
  out: (line) => console.log(line),
  err: (line) => console.error(line),
  tty: process.stderr.isTTY === true,
  progress: (text) => process.stderr.write(`\r\u001b[K${text}`),
}).then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error);
    process.exit(2);
  },
);
