import { type ChildProcess, spawn } from "node:child_process";
import { signMetaBody } from "../../src/webhook/signature.ts";
import { TEST_APP_SECRET } from "./harness.ts";

/** src/main.ts as operators run it, in a process of its own, its log collected. */
export interface EntryPoint {
  child: ChildProcess;
  /** Everything it wrote so far, stdout and stderr. */
  readonly output: string;
  /** Its exit code, once it has exited. */
  exited: Promise<number | null>;
}

/** `tsx src/main.ts <args>` with the test's environment over this one's. */
export function runEntryPoint(args: string[], env: Record<string, string>): EntryPoint {
  let output = "";
  const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts", ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return {
    child,
    get output() {
      return output;
    },
    exited,
  };
}

/** A signed delivery, as Meta makes it, to the web listening at `base`. */
export function deliverOverHttp(base: string, body: string): Promise<Response> {
  return fetch(`${base}/webhook`, {
    method: "POST",
    body,
    headers: { "content-type": "application/json", "x-hub-signature-256": signMetaBody(body, TEST_APP_SECRET) },
  });
}
