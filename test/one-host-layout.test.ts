import { createServer, type Server } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { type EntryPoint, runEntryPoint } from "./support/entry-point.ts";
import { type Harness, startHarness } from "./support/harness.ts";
import { freePort } from "./support/ports.ts";

/**
 * README, "Scaling out on one host": several `npm run web` and `npm run worker` on one machine
 * with nothing set but PORT (DESIGN.md §5); a METRICS_PORT set on purpose is kept to.
 */

let h: Harness | undefined;
let running: EntryPoint[] = [];
let held: Server | undefined;
afterEach(async () => {
  for (const p of running) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill("SIGKILL");
  running = [];
  held?.close();
  held = undefined;
  await h?.close();
  h = undefined;
});

describe("two web and two worker processes on one host, nothing set but PORT", () => {
  it("a METRICS_PORT that is taken stops the start, naming METRICS_PORT", async () => {
    h = await startHarness({ workers: 0 });
    const port = await freePort();
    held = createServer();
    await new Promise<void>((resolve) => held!.listen(port, "127.0.0.1", resolve));
    const worker = runEntryPoint(["worker"], { ...h.env, METRICS_PORT: String(port), METRICS_HOST: "127.0.0.1" });
    running = [worker];
    expect(await worker.exited).toBe(1);
    expect(worker.output).toContain(`METRICS_PORT=${port}: cannot listen on 127.0.0.1:${port} (the port is taken)`);
    expect(worker.events("worker.started")).toEqual([]); // it stopped before taking a job
  }, 60_000);
});
