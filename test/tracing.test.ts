import type { ChildProcess } from "node:child_process";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { inboundJobId } from "../src/queue/catalog.ts";
import { deliverOverHttp, PATIENT_TIMEOUTS, PROCESS_DEADLINE_MS, runEntryPoint, untilReady } from "./support/entry-point.ts";
import { eventually, type Harness, startHarness } from "./support/harness.ts";
import { freePort } from "./support/ports.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * Traces as operators turn them on: the real entry point (`npm start`: the web, and the
 * workers in a child process) exporting to a local OTLP/HTTP receiver.
 */

interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
  service: string;
}

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
  doubleValue?: number;
}
type OtlpAttributes = { key: string; value: OtlpValue }[];
interface OtlpExport {
  resourceSpans?: {
    resource?: { attributes?: OtlpAttributes };
    scopeSpans?: { spans?: (Omit<ReceivedSpan, "attributes" | "service"> & { attributes?: OtlpAttributes })[] }[];
  }[];
}

const flat = (attributes: OtlpAttributes = []) =>
  Object.fromEntries(attributes.map(({ key, value }) => [key, value.stringValue ?? value.intValue ?? value.boolValue ?? value.doubleValue]));

/** A collector's OTLP/HTTP traces endpoint, JSON encoding: every span posted to it, and every request of any kind. */
class OtlpReceiver {
  readonly spans: ReceivedSpan[] = [];
  readonly requests: string[] = [];
  private server: Server | undefined;

  async start(port = 0): Promise<this> {
    this.server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on("data", (chunk: Buffer) => chunks.push(chunk));
      request.on("end", () => {
        this.requests.push(`${request.method} ${request.url} ${request.headers["content-type"] ?? ""}`);
        if (request.method === "POST" && request.url === "/v1/traces" && request.headers["content-type"] === "application/json") {
          const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as OtlpExport;
          for (const resource of body.resourceSpans ?? []) {
            const service = String(flat(resource.resource?.attributes)["service.name"]);
            for (const scope of resource.scopeSpans ?? []) {
              for (const span of scope.spans ?? []) this.spans.push({ ...span, attributes: flat(span.attributes), service });
            }
          }
        }
        response.writeHead(200, { "content-type": "application/json" }).end("{}");
      });
    });
    // No host: the unspecified address, so "localhost" reaches it over IPv4 and IPv6 alike.
    await new Promise<void>((resolve, reject) => {
      this.server!.once("error", reject);
      this.server!.listen(port, resolve);
    });
    return this;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server!.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}

/** OTLP's span kinds (SpanKind + 1: 0 is "unspecified" on the wire). */
const KIND = { internal: 1, server: 2, client: 3, producer: 4, consumer: 5 } as const;

let h: Harness | undefined;
let child: ChildProcess | undefined;
let receiver: OtlpReceiver | undefined;
afterEach(async () => {
  if (child && child.exitCode === null) child.kill("SIGKILL");
  await h?.close();
  await receiver?.stop();
  h = child = receiver = undefined;
});

/** `npm start` with these variables beside the harness's; one message answered, then SIGTERM. Returns its log. */
async function answerOneMessage(env: Record<string, string>): Promise<{ output: string; wamid: string }> {
  h = await startHarness({ workers: 0 });
  const port = await freePort();
  const main = runEntryPoint(["all"], { ...h.env, ...PATIENT_TIMEOUTS, PORT: String(port), HOST: "127.0.0.1", LOG_LEVEL: "info", ...env });
  child = main.child;

  const base = `http://127.0.0.1:${port}`;
  await untilReady(base);
  await main.event("worker.child_started"); // the worker child (niceness 19) has started its workers
  const { body, wamids } = textWebhook({ text: "is my order on its way?" });
  expect((await deliverOverHttp(base, body)).status).toBe(200);
  await eventually(async () => (await h!.db.reply.count({ where: { state: "sent" } })) === 1, "the reply to be sent", PROCESS_DEADLINE_MS);
  child.kill("SIGTERM"); // the shutdown exports what is still buffered
  expect(await main.exited).toBe(0);
  expect(h.graph.sentTexts).toEqual(["Reply #1"]);
  return { output: main.output, wamid: wamids[0]! };
}

describe("traces", () => {
  it("one message is one trace: the webhook delivery, the inbound job, the reply job, Claude and the Graph send, each inside the one before", async () => {
    receiver = await new OtlpReceiver().start();
    const { output } = await answerOneMessage({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url });

    const { spans } = receiver;
    const webhook = spans.find((s) => s.name === "POST /webhook");
    expect(webhook, `spans: ${spans.map((s) => s.name).join(", ")}`).toBeDefined();
    expect(webhook).toMatchObject({
      kind: KIND.server,
      service: "whatsapp-ai-reply-web",
      attributes: { "http.route": "/webhook", "http.response.status_code": 200 },
    });
    expect(webhook!.parentSpanId ?? "").toBe(""); // the root: Meta sends no trace context

    const trace = spans.filter((s) => s.traceId === webhook!.traceId);
    const byId = new Map(trace.map((s) => [s.spanId, s]));
    const parentOf = (span: ReceivedSpan) => (span.parentSpanId ? byId.get(span.parentSpanId) : undefined);
    const one = (name: string) => {
      const found = trace.filter((s) => s.name === name);
      expect(found, `${name} in ${trace.map((s) => s.name).join(", ")}`).toHaveLength(1);
      return found[0]!;
    };

    const inbound = one("process inbound");
    expect(inbound).toMatchObject({ kind: KIND.consumer, service: "whatsapp-ai-reply-worker" });
    expect(parentOf(inbound)).toBe(webhook); // across Redis, in the job's own options

    const scheduled = one("add reply.reply");
    expect(scheduled.kind).toBe(KIND.producer);
    expect(parentOf(scheduled)).toBe(inbound);

    // The debounce may postpone the reply job's first run: every run is a child of the add.
    const replyRuns = trace.filter((s) => s.name === "process reply");
    expect(replyRuns.length).toBeGreaterThanOrEqual(1);
    for (const run of replyRuns) expect(parentOf(run)).toBe(scheduled);

    const claude = one("anthropic.messages.create"); // the Anthropic SDK's own span
    expect(claude).toMatchObject({ kind: KIND.client, attributes: { "gen_ai.provider.name": "anthropic", "gen_ai.request.model": "claude-haiku-5-5" } });
    const send = one("whatsapp send");
    expect(send).toMatchObject({ kind: KIND.client, attributes: { "messaging.system": "whatsapp", "whatsapp.message.type": "text" } });
    const outbound = await h!.db.outboundMessage.findFirstOrThrow({ select: { wamid: true } });
    expect(send.attributes["messaging.message.id"]).toBe(outbound.wamid);
    const answering = parentOf(claude)!;
    expect(answering.name).toBe("process reply");
    expect(parentOf(send)).toBe(answering); // the run that asked Claude sent its answer

    // The words stay out of traces, as out of logs (law 10).
    expect(JSON.stringify(spans)).not.toContain("is my order on its way?");
    expect(JSON.stringify(spans)).not.toContain("Reply #1");
    // Log lines written inside a span name its trace.
    expect(output).toContain(`"trace_id":"${webhook!.traceId}"`);
  }, 900_000);

  it("off by default: no exporter starts, nothing is sent anywhere and jobs carry no trace", async () => {
    // Where an SDK would send by default (localhost:4318), something listens and counts.
    receiver = await new OtlpReceiver().start(4318);
    const { output, wamid } = await answerOneMessage({ OTEL_SERVICE_NAME: "would-be-traced" });

    expect(receiver.requests).toEqual([]);
    expect(output).not.toContain("tracing.started");
    expect(output).not.toContain("trace_id");
    const job = await h!.queues.inbound.getJob(inboundJobId(wamid));
    expect(job?.opts.telemetry).toBeUndefined();
  }, 900_000);
});
