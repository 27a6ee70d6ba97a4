import type { ChildProcess } from "node:child_process";
import { afterEach, describe, expect, it } from "vitest";
import { deliverOverHttp, PATIENT_TIMEOUTS, PROCESS_DEADLINE_MS, runEntryPoint, untilReady } from "./support/entry-point.ts";
import { eventually, type Harness, startHarness } from "./support/harness.ts";
import { freePort } from "./support/ports.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/** The real entry point as operators run it (`npm start` = src/main.ts all --migrate). */

let h: Harness | undefined;
let child: ChildProcess | undefined;
afterEach(async () => {
  if (child && child.exitCode === null) child.kill("SIGKILL");
  await h?.close();
});

describe("the process", () => {
  it("serves webhooks and replies, and on SIGTERM finishes the reply in flight, closes and exits 0", async () => {
    h = await startHarness({ workers: 0 });
    const [port, metricsPort] = [await freePort(), await freePort()];
    const main = runEntryPoint(["all", "--migrate"], {
      ...h.env,
      PORT: String(port),
      HOST: "127.0.0.1",
      METRICS_PORT: String(metricsPort),
      LOG_LEVEL: "info",
      ...PATIENT_TIMEOUTS,
    });
    child = main.child;

    const base = `http://127.0.0.1:${port}`;
    await untilReady(base);
    await main.event("worker.child_started"); // the worker child (niceness 19) has started its workers
    expect(main.output).toContain('"event":"db.migrated"');
    expect(main.output).toContain('"event":"webhook.serving_every_number"'); // no PHONE_NUMBERS_FILE: it says so
    const scrape = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
    expect(scrape.status).toBe(200);
    expect(await scrape.text()).toContain("process_cpu_user_seconds_total");
    expect((await fetch(`${base}/metrics`)).status).toBe(404); // not on the webhook's port

    h.claude.latencyMs = 1500; // Claude is still writing when the signal arrives
    const { body } = textWebhook({ text: "still there?" });
    expect((await deliverOverHttp(base, body)).status).toBe(200);
    await eventually(() => h!.claude.inFlight === 1, "the reply to be in Claude's hands", PROCESS_DEADLINE_MS);

    child.kill("SIGTERM");
    expect(await main.exited).toBe(0);
    expect(h.graph.sentTexts).toEqual(["Reply #1"]); // the active job finished before the exit
    expect(await h.db.reply.count({ where: { state: "sent" } })).toBe(1);
    expect(main.output).toContain('"event":"shutdown.done"');
    await expect(fetch(`${base}/healthz`)).rejects.toThrow(); // no longer listening
    await expect(fetch(`http://127.0.0.1:${metricsPort}/metrics`)).rejects.toThrow();
  }, 900_000);

  it("a worker-only process serves its own job counters on METRICS_PORT, to METRICS_TOKEN's bearer", async () => {
    h = await startHarness({ workers: 0 });
    const metricsPort = await freePort();
    const token = "metrics-token-0123456789";
    const worker = runEntryPoint(["worker"], { ...h.env, ...PATIENT_TIMEOUTS, METRICS_PORT: String(metricsPort), METRICS_TOKEN: token, LOG_LEVEL: "info" });
    child = worker.child;
    const scrape = () =>
      fetch(`http://127.0.0.1:${metricsPort}/metrics`, { headers: { authorization: `Bearer ${token}` } }).then(
        (r) => (r.ok ? r.text() : ""),
        () => "",
      );
    await worker.event("worker.started");
    await eventually(scrape, "the worker's metrics listener", PROCESS_DEADLINE_MS);
    expect((await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).status).toBe(401);

    expect((await h.deliver(textWebhook({ text: "hello worker" }).body)).statusCode).toBe(200);
    await eventually(() => h!.graph.sentTexts.length === 1, "the worker process to reply", PROCESS_DEADLINE_MS);
    await eventually(async () => (await scrape()).includes('wa_jobs_total{queue="reply",outcome="sent"} 1'), "its reply to be counted", PROCESS_DEADLINE_MS);
    child.kill("SIGTERM");
    expect(await worker.exited).toBe(0);
  }, 900_000);
});
