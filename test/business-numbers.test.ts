import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { ConfigError } from "../src/config/config.ts";
import { PermanentError } from "../src/errors.ts";
import { createLogger } from "../src/logger.ts";
import { loadSettings } from "../src/settings.ts";
import { GraphClient } from "../src/whatsapp/graph-client.ts";
import { FakeGraph } from "./support/fake-graph.ts";
import { eventually, type Harness, startHarness, testEnv } from "./support/harness.ts";
import { logLines } from "./support/log-lines.ts";
import { untilQuiet } from "./support/quiet.ts";
import { echoChange, envelope, messagesChange, metaWire, statusChange, textMessage, textWebhook } from "./support/webhook-bodies.ts";

/** Issue 3: several business numbers on one deployment, and the 24-hour window's template. */

const SHOP = "106540352242922";
const CLINIC = "106540352249999";
/** Numbers of other businesses whose webhooks reach the same Meta app. */
const STRANGER = "209876543210987";
const ANOTHER_STRANGER = "309876543210987";

let h: Harness;
afterEach(async () => h?.close());

async function numbersFile(content: unknown): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "numbers-"));
  await writeFile(join(dir, "clinic-prompt.txt"), "You book appointments for Clínica Norte.\n");
  const path = join(dir, "numbers.json");
  await writeFile(path, typeof content === "string" ? content : JSON.stringify(content));
  return path;
}

interface Block {
  text: string;
}

describe("several business numbers", () => {
  it("each number keeps its own conversation with a user, answers from that number, with its own system prompt", async () => {
    const file = await numbersFile({ [SHOP]: {}, [CLINIC]: { systemPromptFile: "clinic-prompt.txt" } });
    h = await startHarness({ env: { PHONE_NUMBERS_FILE: file, SYSTEM_PROMPT: "You sell shoes.", REPLY_DEBOUNCE_MS: "0" } });
    const same = "34600111222";
    await h.deliver(metaWire(envelope([messagesChange([textMessage({ from: same, text: "shoes?" })], SHOP)])));
    await eventually(() => h.graph.sends.length === 1, "the shop's reply");
    await h.deliver(metaWire(envelope([messagesChange([textMessage({ from: same, text: "appointment?" })], CLINIC)])));
    await eventually(() => h.graph.sends.length === 2, "the clinic's reply");

    expect(await h.db.conversation.count()).toBe(2);
    expect(h.graph.sends.map((s) => s.path)).toEqual([`/v24.0/${SHOP}/messages`, `/v24.0/${CLINIC}/messages`]);
    const systems = h.claude.requests.map((r) => (r.system as Block[])[0]!.text);
    expect(systems).toEqual(["You sell shoes.", "You book appointments for Clínica Norte."]);
    expect(h.claude.userText(1)).not.toContain("shoes?"); // one number's history never leaks into another's
  });
});

/** Every line a system logs, parsed, for tests that count them. */
function logCapture() {
  const { destination, parsed } = logLines();
  return { logged: parsed, logger: createLogger({ level: "info", destination }) };
}

async function notOursCounted(h: Harness): Promise<Record<string, number>> {
  const metric = await h.metrics.webhookItems.get();
  return Object.fromEntries(metric.values.filter((v) => v.labels.outcome === "not_ours").map((v) => [String(v.labels.kind), v.value]));
}

/** Jobs the webhook made, whatever became of them. */
async function webhookJobs(h: Harness): Promise<{ inbound: number; status: number; events: number }> {
  const total = async (queue: Harness["queues"]["inbound" | "status" | "events"]) => Object.values(await queue.getJobCounts()).reduce((sum, n) => sum + n, 0);
  return { inbound: await total(h.queues.inbound), status: await total(h.queues.status), events: await total(h.queues.events) };
}

describe("a business number that is not ours (PHONE_NUMBERS_FILE lists the numbers served)", () => {
  it("in one signed batch, ours is answered once; the other number's messages, status and echo get a 200, a count and one log line, and nothing else", async () => {
    const { logged, logger } = logCapture();
    h = await startHarness({ env: { PHONE_NUMBERS_FILE: await numbersFile({ [SHOP]: {} }), REPLY_DEBOUNCE_MS: "0" }, logger });
    const theirCustomers = ["34600000001", "34600000002", "34600000003"];
    const batch = metaWire(
      envelope(
        [
          messagesChange([textMessage({ from: "34611111111", text: "do you have size 42?" })], SHOP),
          messagesChange(
            theirCustomers.map((from) => textMessage({ from, text: "is my table booked?" })),
            STRANGER,
          ),
        ],
        [
          statusChange(
            [{ id: "wamid.THEIRS.OUT", status: "delivered", timestamp: String(Math.floor(Date.now() / 1000)), recipient_id: theirCustomers[0] }],
            STRANGER,
          ),
          echoChange({ to: theirCustomers[1]!, text: "Yes, 20:30." }, STRANGER),
        ],
      ),
    );
    expect((await h.deliver(batch)).statusCode).toBe(200);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "our customer's reply");
    // A second delivery for them, and one for a third number: still one line per number.
    const more = metaWire(envelope([messagesChange([textMessage({ from: theirCustomers[2], text: "hello?" })], STRANGER)]));
    expect((await h.deliver(more)).statusCode).toBe(200);
    const third = metaWire(envelope([messagesChange([textMessage({ from: "34600000009", text: "hi" })], ANOTHER_STRANGER)]));
    expect((await h.deliver(third)).statusCode).toBe(200);
    await untilQuiet(h); // everything the deliveries started has run: what must not happen had its chance

    expect(h.claude.requests).toHaveLength(1);
    expect(h.claude.userText(0)).toContain("size 42");
    expect(h.graph.sends.map((s) => s.body.to)).toEqual(["34611111111"]);
    expect(h.graph.requests.filter((r) => !r.path.startsWith(`/v24.0/${SHOP}/`))).toEqual([]); // not even "read" for theirs
    expect(await h.db.conversation.findMany({ select: { phoneNumberId: true } })).toEqual([{ phoneNumberId: SHOP }]);
    expect(await h.db.contact.count()).toBe(1);
    expect(await h.db.inboundMessage.count()).toBe(1);
    expect(await h.db.reply.count()).toBe(1);
    expect(await webhookJobs(h)).toEqual({ inbound: 1, status: 0, events: 0 }); // ours alone
    expect(await notOursCounted(h)).toEqual({ message: 5, status: 1, event: 1 });
    const lines = logged();
    const said = lines.filter((l) => l.event === "webhook.not_ours");
    expect(said.map((l) => l.phoneNumberId)).toEqual([STRANGER, ANOTHER_STRANGER]);
    // Deliveries of nothing but theirs add no line of their own at info: only ours has one.
    expect(lines.filter((l) => l.msg === "delivery accepted")).toHaveLength(1);
  });
});

describe("metadata.phone_number_id that is not digits", () => {
  it("is ignored with a logged reason and never reaches the Graph API's path; every number is served without PHONE_NUMBERS_FILE", async () => {
    const { logged, logger } = logCapture();
    h = await startHarness({ env: { REPLY_DEBOUNCE_MS: "0" }, logger });
    const batch = metaWire(
      envelope([
        messagesChange([textMessage({ from: "34622222222", text: "hola" })], "123/../../me"),
        messagesChange([textMessage({ from: "34633333333", text: "hello" })], STRANGER),
      ]),
    );
    expect((await h.deliver(batch)).statusCode).toBe(200);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the well-formed number's reply");
    await untilQuiet(h);

    expect(h.graph.requests.map((r) => r.path).filter((path) => !path.startsWith(`/v24.0/${STRANGER}/`))).toEqual([]);
    expect(h.claude.requests).toHaveLength(1);
    expect(await h.db.inboundMessage.count()).toBe(1);
    const lines = logged();
    const ignored = lines.filter((l) => l.event === "webhook.ignored");
    expect(ignored).toHaveLength(1);
    expect(ignored[0]).toMatchObject({ where: "entry[0].changes[0]", reason: expect.stringMatching(/phone_number_id "123\/\.\.\/\.\.\/me" is not digits/) });
  });

  it("a send to it is refused before any request: our token never goes to another path", async () => {
    const graph = await new FakeGraph().start();
    try {
      const client = new GraphClient({ baseUrl: graph.url, version: "v24.0", accessToken: "test-access-token", timeoutMs: 1000 });
      const send = client.sendText({ phoneNumberId: "123/../../me", to: { phone: "34622222222" }, text: "hi", bizOpaqueCallbackData: "part-1" });
      await expect(send).rejects.toBeInstanceOf(PermanentError);
      await expect(send).rejects.toMatchObject({ code: "bad_phone_number_id" });
      await expect(client.markReadWithTyping("me", "wamid.X")).rejects.toMatchObject({ code: "bad_phone_number_id" });
      expect(graph.requests).toEqual([]);
    } finally {
      await graph.stop();
    }
  });
});

describe("the 24-hour window with a template configured", () => {
  it("a reply past the window goes out as the number's template, recorded as such, and Claude is not paid", async () => {
    const file = await numbersFile({ [SHOP]: { windowClosedTemplate: { name: "follow_up", language: "es_MX" } } });
    h = await startHarness({ env: { PHONE_NUMBERS_FILE: file } });
    const longAgo = Math.floor(Date.now() / 1000) - 25 * 3600;
    await h.deliver(textWebhook({ text: "¿siguen abiertos?", timestamp: longAgo }).body);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the template to be sent");
    expect(h.graph.requests.filter((r) => r.body.type === "template").map((r) => r.body.template)).toEqual([
      { name: "follow_up", language: { code: "es_MX" } },
    ]);
    expect(h.graph.sends).toHaveLength(0); // no free-form text
    expect(h.claude.requests).toHaveLength(0);
    expect(await h.db.outboundMessage.findFirstOrThrow()).toMatchObject({ template: "follow_up", sendState: "accepted" });
    expect(await h.db.deadLetter.count()).toBe(0);
  });
});

describe("PHONE_NUMBERS_FILE", () => {
  const problemsOf = (env: Record<string, string>) => {
    try {
      loadSettings(testEnv(env));
      return [];
    } catch (error) {
      return (error as ConfigError).problems;
    }
  };

  it("a file listing no number stops start-up: serving none is never meant", async () => {
    expect(problemsOf({ PHONE_NUMBERS_FILE: await numbersFile({}) })).toEqual([
      "PHONE_NUMBERS_FILE lists no business numbers: list the phone_number_ids to answer, or unset it to answer every number",
    ]);
  });

  it("set, it is the numbers served; unset, every number is", async () => {
    expect(loadSettings(testEnv({ PHONE_NUMBERS_FILE: await numbersFile({ [SHOP]: {}, [CLINIC]: {} }) })).servedNumbers).toEqual(new Set([SHOP, CLINIC]));
    expect(loadSettings(testEnv()).servedNumbers).toBe("every");
  });

  it("a malformed file stops start-up, naming the file and what is wrong", async () => {
    expect(problemsOf({ PHONE_NUMBERS_FILE: await numbersFile("{not json") })[0]).toMatch(/^PHONE_NUMBERS_FILE cannot be read as JSON/);
    expect(problemsOf({ PHONE_NUMBERS_FILE: await numbersFile({ abc: {} }) })[0]).toMatch(/^PHONE_NUMBERS_FILE abc: keys must be phone_number_id digits/);
    expect(problemsOf({ PHONE_NUMBERS_FILE: await numbersFile({ [SHOP]: { windowClosedTemplate: { name: "x" } } }) })[0]).toMatch(
      new RegExp(`^PHONE_NUMBERS_FILE ${SHOP}.windowClosedTemplate.language`),
    );
    expect(problemsOf({ PHONE_NUMBERS_FILE: await numbersFile({ [SHOP]: { systemPromptFile: "missing.txt" } }) })[0]).toMatch(
      new RegExp(`^PHONE_NUMBERS_FILE ${SHOP}.systemPromptFile cannot be read`),
    );
  });
});
