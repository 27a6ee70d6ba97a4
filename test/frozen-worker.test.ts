import { type ChildProcess, spawn } from "node:child_process";
import { afterEach, describe, expect, it } from "vitest";
import { MAIN_JS } from "./support/build.ts";
import { delayedUntil, eventually, type Harness } from "./support/harness.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { untilQuiet } from "./support/quiet.ts";
import { statusWebhook, textWebhook } from "./support/webhook-bodies.ts";

/**
 * Law 8 when a worker freezes (a GC pause, a stopped VM, a partition from Redis) past its
 * BullMQ lock and another worker takes the job over: the database's fence, not only the
 * queue's lock, keeps one voice. A real worker process is sent SIGSTOP mid-reply for longer
 * than JOB_LOCK_MS, a second worker takes over, then the first gets SIGCONT: the customer
 * gets one reply.
 */

const harness = harnessPerTest();
let child: ChildProcess | undefined;
afterEach(() => {
  if (child && child.exitCode === null) {
    child.kill("SIGCONT");
    child.kill("SIGKILL");
  }
  child = undefined;
});

function startWorkerProcess(h: Harness): ChildProcess {
  return spawn(process.execPath, [MAIN_JS, "worker"], { env: { ...process.env, ...h.env, LOG_LEVEL: "silent" }, stdio: "ignore" });
}

const fence = async (h: Harness) => (await h.db.conversation.findFirstOrThrow()).replyFence;
const ENV = { JOB_LOCK_MS: "1000", REPLY_DEBOUNCE_MS: "0" };
const RECONCILE_WAIT_MS = 2000;

/** When BullMQ will run the conversation's delayed reply job, if it is delayed. */
async function replyJobDelayedUntil(h: Harness): Promise<number | undefined> {
  const [job] = await h.queues.reply.getDelayed();
  return job?.id ? delayedUntil(h.redis, h.queues.reply, job.id) : undefined;
}

const sleepUntil = (epochMs: number) => new Promise((r) => setTimeout(r, Math.max(0, epochMs - Date.now())));

describe("a worker frozen past its lock", () => {
  it("frozen while Meta was taking its send: the worker that takes over waits for the status instead of sending again", async () => {
    const h = await harness({ workers: 0, env: { ...ENV, GRAPH_TIMEOUT_MS: "8000", SEND_RECONCILE_WAIT_MS: String(RECONCILE_WAIT_MS) } });
    h.graph.answerSends({ status: 200, delayMs: 2500 }); // Meta takes it; its answer comes while the sender is frozen
    child = startWorkerProcess(h);
    await h.deliver(textWebhook({ text: "can I change my order?" }).body);
    await eventually(() => h.graph.sends.length === 1, "the worker process to reach Meta with the send", 60_000);
    child.kill("SIGSTOP");
    // Until this deadline, recorded as the part was marked sending (send lease + Graph timeout +
    // reconcile wait, about 10.5 s on), Meta may have the message and its status may still come.
    const part = await h.db.outboundMessage.findFirstOrThrow();
    expect(part).toMatchObject({ sendState: "sending", sendAttempt: 1, wamid: null });
    const deadline = part.resendAfter!.getTime();

    h.startWorkers(); // takes the job over once its lock has expired
    await eventually(async () => (await fence(h)) >= 2n, "the second worker to take the conversation over", 15_000);
    await eventually(async () => ((await replyJobDelayedUntil(h)) ?? 0) >= deadline, "the worker that took over to wait until the part's deadline");
    // The status comes only in the window's last stretch, its reconcile wait: a worker that sent
    // again at any time before would have done it by now.
    await sleepUntil(deadline - RECONCILE_WAIT_MS);
    expect(h.graph.sends).toHaveLength(1);
    await h.deliver(statusWebhook({ id: "wamid.TAKEN", status: "sent", biz_opaque_callback_data: part.id }));
    const confirmed = await eventually(
      () => h.db.outboundMessage.findFirst({ where: { id: part.id, sendState: "accepted" } }),
      "the status to confirm the part",
    );
    expect(confirmed.wamid).toBe("wamid.TAKEN"); // the status confirmed it, not the frozen worker
    expect(confirmed.acceptedAt!.getTime()).toBeLessThan(deadline); // the scenario: the status came within the window
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the reply to be recorded sent");
    // The run that took over wakes at the deadline, finds the part confirmed, and ends.
    await eventually(async () => {
      const counts = await h.queues.reply.getJobCounts("waiting", "active", "delayed", "prioritized");
      return Object.values(counts).every((n) => n === 0);
    }, "every reply job to have run");

    // The frozen worker wakes behind the new fence, drains and exits: all it would do, it has done.
    child.kill("SIGCONT");
    child.kill("SIGTERM");
    await eventually(() => child?.exitCode !== null || child?.signalCode !== null, "the woken worker to drain and exit", 30_000);
    expect(h.graph.sends).toHaveLength(1);
    expect(h.claude.requests).toHaveLength(1);
  }, 90_000);

  it("frozen while Claude was writing: the worker that takes over waits for that call, and its answer, stored when the frozen one wakes, goes out once: Claude is paid once", async () => {
    // A generation deadline (Claude's timeout and a margin) well beyond the takeover: on a
    // loaded machine the lock's expiry and the second worker's start took past a 6 s one, and
    // the takeover then rightly asked Claude itself, which is another test's scenario (below).
    const h = await harness({ workers: 0, env: { ...ENV, ANTHROPIC_TIMEOUT_MS: "12000" } });
    h.claude.latencyMs = 2500;
    child = startWorkerProcess(h);
    await h.deliver(textWebhook({ text: "what sizes do you have?" }).body);
    await eventually(() => h.claude.inFlight === 1, "the worker process to be waiting on Claude", 60_000);
    child.kill("SIGSTOP");

    h.startWorkers(); // takes the job over once its lock has expired...
    await eventually(async () => (await fence(h)) >= 2n, "the second worker to take the conversation over", 15_000);
    // ...and, the call being one that may still answer (until the reply's generation deadline), waits for it.
    const { generationDeadline } = await h.db.reply.findFirstOrThrow();
    await eventually(async () => (await replyJobDelayedUntil(h)) === generationDeadline!.getTime(), "the takeover to wait for the call's deadline");
    expect(h.claude.requests).toHaveLength(1);

    child.kill("SIGCONT"); // the frozen worker wakes to Claude's answer: stored, not sent (it no longer holds the conversation)
    await eventually(async () => (await h.db.reply.findFirstOrThrow()).state === "ready", "the woken worker to store the answer it was paid for");
    await eventually(() => h.graph.sends.length === 1, "the holder to send it", 30_000);
    await untilQuiet(h);
    expect(h.graph.sentTexts).toEqual(["Reply #1"]);
    expect(h.claude.requests).toHaveLength(1);
    expect(await h.db.reply.findFirstOrThrow()).toMatchObject({ state: "sent", text: "Reply #1" });
  }, 90_000);

  it("killed while Claude was writing: the worker that takes over asks Claude only once the killed call's deadline has passed, and answers once", async () => {
    const h = await harness({ workers: 0, env: ENV });
    h.claude.latencyMs = 2500;
    const asked: number[] = [];
    h.claude.onRequest = () => void asked.push(Date.now());
    child = startWorkerProcess(h);
    await h.deliver(textWebhook({ text: "do you ship to Madeira?" }).body);
    await eventually(() => h.claude.inFlight === 1, "the worker process to be waiting on Claude", 60_000);
    const { generationDeadline } = await h.db.reply.findFirstOrThrow();
    child.kill("SIGKILL"); // its call is paid for, and nobody will ever read the answer

    h.startWorkers();
    await eventually(() => h.graph.sends.length === 1, "the takeover's answer", 45_000);
    await untilQuiet(h);
    expect(asked).toHaveLength(2);
    expect(asked[1]).toBeGreaterThanOrEqual(generationDeadline!.getTime());
    expect(h.graph.sentTexts).toEqual(["Reply #2"]);
  }, 90_000);
});
