import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";
import { MAIN_JS } from "./support/build.ts";
import { anthropicError } from "./support/fake-anthropic.ts";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness } from "./support/harness.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { untilQuiet } from "./support/quiet.ts";
import { statusWebhook, textWebhook } from "./support/webhook-bodies.ts";

/** Law 14: a customer whose reply is dead-lettered hears that a person will answer, once, when WhatsApp allows it. */

const HOLDING = "Thanks for your message. A person from our team will get back to you here shortly.";
const harness = harnessPerTest({ env: { HOLDING_REPLY: HOLDING } });

const openItems = (h: Harness) => h.db.deadLetter.findMany({ where: { state: "open" }, include: { actions: true } });
const failed = (wamid: string, code: number) =>
  statusWebhook({ id: wamid, status: "failed", errors: [{ code, title: "Failed", error_data: { details: "…" } }] });

describe("the holding reply", () => {
  it("a reply Claude could not write is dead-lettered, and the customer hears HOLDING_REPLY once, sent like any part; the item's history says so", async () => {
    const h = await harness();
    h.claude.answer({ status: 400, body: anthropicError(400) });
    await h.deliver(textWebhook({ text: "where is my parcel?" }).body);
    await eventually(async () => (await h.db.reply.count({ where: { kind: "holding", state: "sent" } })) === 1, "the holding reply to be sent");
    await untilQuiet(h);

    expect(h.graph.sentTexts).toEqual([HOLDING]);
    expect(h.claude.requests).toHaveLength(1);
    const [item] = await openItems(h);
    const holding = await h.db.reply.findFirstOrThrow({ where: { kind: "holding" }, include: { parts: true } });
    expect(item).toMatchObject({ source: "anthropic", holdingReplyId: holding.id });
    expect(holding.parts).toEqual([expect.objectContaining({ sendState: "accepted", text: HOLDING })]);
    expect(h.graph.sends[0]!.body.biz_opaque_callback_data).toBe(holding.parts[0]!.id);
    expect(item!.actions.map((a) => a.action)).toEqual(["holding_reply"]);
  });

  it("is said once per open item: a failed status delivered three times makes one item and one holding message", async () => {
    const h = await harness();
    await h.deliver(textWebhook({ text: "hello" }).body);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the reply to be sent");
    const { wamid } = await h.db.outboundMessage.findFirstOrThrow();
    for (let i = 0; i < 3; i++) expect((await h.deliver(failed(wamid!, 131000))).statusCode).toBe(200);
    await eventually(async () => (await h.db.reply.count({ where: { kind: "holding", state: "sent" } })) === 1, "the holding reply to be sent");
    await untilQuiet(h);

    expect(h.graph.sentTexts).toEqual(["Reply #1", HOLDING]);
    expect(await openItems(h)).toHaveLength(1);
  });

  it("is not said after a closed window, to a number that cannot receive WhatsApp, to a customer who opted out, or on a handoff", async () => {
    const h = await harness();
    const dayAgo = Math.floor(Date.now() / 1000) - 25 * 3600;
    // Window closed: the customer wrote 25 hours ago, and the number has no template.
    await h.deliver(textWebhook({ text: "late", from: "4915110000001", timestamp: dayAgo }).body);
    // Meta reports the number cannot receive it (131026).
    await h.deliver(textWebhook({ text: "hi", from: "4915110000002" }).body);
    // The customer opts out; the confirmation then fails.
    await h.deliver(textWebhook({ text: "stop", from: "4915110000003" }).body);
    // The customer asks for a person: the handoff has its own reply.
    await h.deliver(textWebhook({ text: "human", from: "4915110000004" }).body);
    await eventually(() => h.graph.sends.length === 3, "the reply, the opt-out confirmation and the handoff reply");
    const wamidTo = async (to: string) => {
      const send = h.graph.sends.find((s) => s.body.to === to)!;
      return (
        await eventually(
          () => h.db.outboundMessage.findFirst({ where: { id: String(send.body.biz_opaque_callback_data), wamid: { not: null } } }),
          `the send to ${to} recorded`,
        )
      ).wamid!;
    };
    await h.deliver(failed(await wamidTo("4915110000002"), 131026));
    await h.deliver(failed(await wamidTo("4915110000003"), 131000));
    await eventually(async () => (await h.db.deadLetter.count()) === 4, "four items");
    await untilQuiet(h);

    expect(await h.db.reply.count({ where: { kind: "holding" } })).toBe(0);
    expect(h.graph.sends).toHaveLength(3);
    expect((await h.db.deadLetter.findMany({ select: { holdingReplyId: true } })).every((d) => d.holdingReplyId === null)).toBe(true);
  });

  it("a holding reply Meta refuses joins its item's history: no second item, and no holding message about the holding message", async () => {
    const h = await harness();
    h.claude.answer({ status: 400, body: anthropicError(400) });
    h.graph.answerSends({ status: 400, body: graphError(131026, "Message undeliverable") });
    await h.deliver(textWebhook({ text: "hello" }).body);
    await eventually(async () => (await h.db.reply.count({ where: { kind: "holding", state: "dead" } })) === 1, "the holding reply to fail");
    await untilQuiet(h);

    const items = await openItems(h);
    expect(items).toHaveLength(1);
    expect(items[0]!.actions.map((a) => a.action).sort()).toEqual(["holding_failed", "holding_reply"]);
    expect(await h.db.reply.count({ where: { kind: "holding" } })).toBe(1);
  });

  it("a worker process killed while sending it: the holding message reaches the customer once, its status confirming the send", async () => {
    const h = await harness({ workers: 0, env: { JOB_LOCK_MS: "1000", GRAPH_TIMEOUT_MS: "5000", SEND_RECONCILE_WAIT_MS: "500" } });
    h.claude.answer({ status: 400, body: anthropicError(400) });
    h.graph.answerSends({ hang: true }); // Meta takes the holding message and never answers
    const child = spawn(process.execPath, [MAIN_JS, "worker"], {
      env: { ...process.env, ...h.env, LOG_LEVEL: "silent" },
      stdio: "ignore",
    });
    try {
      await h.deliver(textWebhook({ text: "hello" }).body);
      await eventually(() => h.graph.sends.length === 1, "the worker process to reach Meta with the holding message", 60_000);
    } finally {
      child.kill("SIGKILL");
    }
    await new Promise((resolve) => child.once("exit", resolve));
    const part = await h.db.outboundMessage.findFirstOrThrow({ where: { reply: { kind: "holding" } } });
    expect(part.sendState).toBe("sending");
    // Meta's status for the send it took arrives while the part waits for it (law 5).
    expect((await h.deliver(statusWebhook({ id: "wamid.HOLD1", status: "sent", biz_opaque_callback_data: part.id }))).statusCode).toBe(200);

    h.startWorkers();
    await eventually(
      async () => (await h.db.reply.count({ where: { kind: "holding", state: "sent" } })) === 1,
      "the holding reply to be recorded sent",
      30_000,
    );
    await untilQuiet(h);
    expect(h.graph.sentTexts).toEqual([HOLDING]);
    expect(h.claude.requests).toHaveLength(1);
  }, 90_000);
});
