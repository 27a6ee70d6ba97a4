import { createServer, type Server } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { DEFAULT_METRICS_PORTS } from "../src/config/config.ts";
import { deliverOverHttp, type EntryPoint, PROCESS_DEADLINE_MS, runEntryPoint } from "./support/entry-point.ts";
import { eventually, type Harness, startHarness } from "./support/harness.ts";
import { accepts, freePort, freePorts } from "./support/ports.ts";
import { samplesOf } from "./support/prometheus-text.ts";
import { untilQuiet } from "./support/quiet.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * README, "Scaling out on one host": two `npm run web` and two `npm run worker` on one machine
 * with nothing set but PORT (DESIGN.md §5). Each process must start, take a metrics port of
 * its own and say which, and the first webhook each web takes must be accepted. Other
 * developers' tests may hold ports of the metrics range, 9464 too: only the ports our
 * processes log are relied on.
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

const CUSTOMERS_PER_WEB = 10;

/**
 * Delivers `body` as soon as the web at `port` takes connections, and returns the answer: its
 * very first webhook. A bare TCP probe first, every few ms: thousands of refused fetches
 * would cost the loaded machine more than the processes' start-up.
 */
async function firstAnswer(web: EntryPoint, port: number, body: string): Promise<number> {
  while (!(await accepts(port))) {
    if (web.child.exitCode !== null) throw new Error(`the web on ${port} exited with ${web.child.exitCode}:\n${web.output}`);
    await new Promise((r) => setTimeout(r, 5));
  }
  return (await deliverOverHttp(`http://127.0.0.1:${port}`, body)).status;
}

describe("two web and two worker processes on one host, nothing set but PORT", () => {
  it("each process takes a metrics port of its own and logs it, each web accepts its first webhook, and every message is answered once", async () => {
    h = await startHarness({ workers: 0 });
    // The layout's environment: the harness's secrets, schema, prefix and fakes, and no METRICS_PORT.
    const env = { ...h.env, LOG_LEVEL: "info", METRICS_PORT: undefined };
    const webPorts = await freePorts(2);
    const webs = webPorts.map((port) => runEntryPoint(["web"], { ...env, PORT: String(port) }));
    const workers = [runEntryPoint(["worker"], env), runEntryPoint(["worker"], env)];
    running = [...webs, ...workers];

    const customers = webs.map((_, w) => Array.from({ length: CUSTOMERS_PER_WEB }, (_, i) => `1650555${w}${String(i).padStart(3, "0")}`));
    const bodies = customers.map((numbers) => numbers.map((from) => textWebhook({ from, text: `hello from ${from}` }).body));

    const firsts = await Promise.all(webs.map((web, w) => firstAnswer(web, webPorts[w]!, bodies[w]![0]!)));
    expect(firsts, "each web's first webhook").toEqual([200, 200]);
    const rest = await Promise.all(webs.flatMap((_, w) => bodies[w]!.slice(1).map((body) => deliverOverHttp(`http://127.0.0.1:${webPorts[w]}`, body))));
    expect(rest.map((res) => res.status)).toEqual(rest.map(() => 200));

    const everyone = customers.flat();
    await Promise.all(workers.map((worker) => worker.event("worker.started")));
    await eventually(() => h!.graph.sends.length >= everyone.length, "every customer to be answered", PROCESS_DEADLINE_MS);
    await untilQuiet(h, { timeoutMs: PROCESS_DEADLINE_MS }); // every job the processes took has run: a second answer had its chance
    const answered = h.graph.sends.map((send) => String(send.body.to));
    expect(answered.sort()).toEqual([...everyone].sort());
    expect(h.claude.requests).toHaveLength(everyone.length);

    // Every process's metrics, where its log line says they are: four distinct ports of the range.
    const listening = await Promise.all(running.map((p) => p.event("metrics.listening")));
    const ports = listening.map((line) => Number(line.port));
    expect(new Set(ports).size).toBe(4);
    for (const [i, line] of listening.entries()) {
      expect(line.port).toBeGreaterThanOrEqual(DEFAULT_METRICS_PORTS.first);
      expect(line.port).toBeLessThanOrEqual(DEFAULT_METRICS_PORTS.last);
      expect(line.host).toBe("127.0.0.1");
      expect(line.pid).toBe(running[i]!.child.pid);
      // Off the default, it says so.
      expect(line.movedFrom).toBe(line.port === DEFAULT_METRICS_PORTS.first ? undefined : DEFAULT_METRICS_PORTS.first);
    }
    const scrape = async (port: number) => {
      const res = await fetch(`http://127.0.0.1:${port}/metrics`);
      expect(res.status, `/metrics on ${port}`).toBe(200);
      return res.text();
    };
    // What a scraper sums over the four: every webhook taken by a web, every reply sent by a worker.
    const total = (texts: string[], name: string, labels: Record<string, string>) =>
      texts.flatMap((text) => samplesOf(text, name, labels)).reduce((sum, sample) => sum + sample.value, 0);
    const accepted = total(await Promise.all(ports.map(scrape)), "wa_webhook_items_total", { kind: "message", outcome: "enqueued" });
    expect(accepted).toBe(everyone.length);
    await eventually(
      async () => total(await Promise.all(ports.map(scrape)), "wa_jobs_total", { queue: "reply", outcome: "sent" }) === everyone.length,
      "the workers' metrics to count every reply",
      PROCESS_DEADLINE_MS,
    );

    for (const p of running) p.child.kill("SIGTERM");
    expect(await Promise.all(running.map((p) => p.exited))).toEqual([0, 0, 0, 0]);
  }, 900_000);

  it("a METRICS_PORT that is taken stops the start, naming METRICS_PORT", async () => {
    h = await startHarness({ workers: 0 });
    const port = await freePort();
    held = createServer();
    await new Promise<void>((resolve) => held!.listen(port, "127.0.0.1", resolve));
    const worker = runEntryPoint(["worker"], { ...h.env, METRICS_PORT: String(port) });
    running = [worker];
    expect(await worker.exited).toBe(1);
    expect(worker.output).toContain(`METRICS_PORT=${port}: cannot listen on 127.0.0.1:${port} (the port is taken)`);
    expect(worker.events("worker.started")).toEqual([]); // it stopped before taking a job
  }, 900_000);
});
