import { randomBytes } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { DemoRefusal, demoSettings } from "../sim/environment.ts";
import { NO_FAULTS } from "../sim/faults.ts";
import { LocalServer } from "../sim/local-server.ts";
import { type DemoSystem, startDemo } from "../sim/system.ts";
import { verifyMetaSignature } from "../src/webhook/signature.ts";
import { demoTestEnv, removeDemoData } from "./support/demo.ts";
import { eventually, startHarness } from "./support/harness.ts";
import { untilQuiet } from "./support/quiet.ts";

/**
 * Issue 9, `npm run demo`, through its JSON API: the whole system in one process, the
 * simulated Meta posting signed webhooks in Meta's wire format to the real POST /webhook,
 * the offline responder answering on Anthropic's protocol. Nothing of ours is mocked.
 */

interface ChatMessage {
  id: string;
  direction: "in" | "out";
  text: string;
  status: string;
  replyTo?: { id: string; text: string };
  part?: { n: number; of: number };
}
interface Chat {
  typing: boolean;
  openDeadLetters: number;
  messages: ChatMessage[];
}

let phones = 0;
const newPhone = () => `4477009${String(Date.now() % 10000).padStart(4, "0")}${++phones}`;

describe("npm run demo's sandbox, through its JSON API", () => {
  const id = randomBytes(4).toString("hex");
  let demo: DemoSystem;
  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${demo.url}${path}`, {
      method,
      ...(body === undefined ? {} : { headers: { "content-type": "application/json" }, body: JSON.stringify(body) }),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
  const chat = async (key: string) => (await api("GET", `/demo/api/chats/${encodeURIComponent(key)}`)).body as unknown as Chat;
  const replies = async (key: string) => (await chat(key)).messages.filter((m) => m.direction === "out");
  const firstReply = async (key: string, what: string) =>
    (
      await eventually(async () => {
        const out = await replies(key);
        return out.length > 0 ? out : undefined;
      }, what)
    )[0]!;
  const write = async (body: Record<string, unknown>) => {
    const sent = await api("POST", "/demo/api/messages", body);
    expect(sent.status).toBe(202);
    return String(sent.body.id);
  };

  beforeAll(async () => {
    demo = await startDemo({ env: demoTestEnv(id) });
  }, 60_000);
  afterEach(() => void demo.sandbox.setFaults(NO_FAULTS));
  afterAll(async () => {
    await demo?.close();
    await removeDemoData(id);
  });

  it("a customer's message is answered by the offline responder through the real webhook, queues and workers; the reply's ticks reach read", async () => {
    const from = newPhone();
    const wamid = await write({ from, text: "Are you open on Sunday? José / café" });
    const [reply] = await eventually(async () => {
      const out = await replies(from);
      return out.length > 0 && out[0]!.status === "read" ? out : undefined;
    }, "the reply, read");
    expect(reply!.text).toMatch(/^\(offline demo\) You wrote: “Are you open on Sunday\? José \/ café”/);
    expect(reply!.text).toContain("closed on Sundays");
    const mine = (await chat(from)).messages.find((m) => m.id === wamid);
    expect(mine).toMatchObject({ direction: "in", text: "Are you open on Sunday? José / café", status: "read" });
    // The backend stored it under Meta's wamid and recorded Meta's statuses for its reply.
    expect(await demo.db.inboundMessage.count({ where: { wamid } })).toBe(1);
    expect(await demo.db.outboundMessage.findFirstOrThrow({ where: { wamid: reply!.id } })).toMatchObject({ status: "read", sendState: "accepted" });
    const log = (await api("GET", "/demo/api/events")).body.events as { text: string }[];
    expect(log.map((e) => e.text)).toContainEqual(expect.stringContaining(`${wamid}: POST /webhook → 200`));
    expect(log.map((e) => e.text)).toContainEqual(expect.stringContaining("Read receipt + typing indicator"));
  });

  it("webhooks are in Meta's wire format (\\uXXXX, \\/) and signed with the sandbox's own app secret over those bytes", async () => {
    const capture = new LocalServer();
    const bodies: { raw: Buffer; signature: string | undefined }[] = [];
    await capture.start((req, raw, res) => {
      bodies.push({ raw, signature: req.headers["x-hub-signature-256"] as string | undefined });
      res.writeHead(200).end();
    });
    try {
      demo.sandbox.deliverTo(`${capture.url}/webhook`);
      await write({ from: newPhone(), name: "Zoë", text: "Ça va? 1/2 😀" });
      const { raw, signature } = await eventually(() => bodies[0], "the webhook");
      const text = raw.toString("utf8");
      expect(text).toMatch(/^[\x20-\x7e]+$/);
      expect(text).toContain("\\u00c7a va? 1\\/2 \\ud83d\\ude00");
      expect(text).toContain('"name":"Zo\\u00eb"');
      expect(verifyMetaSignature(raw, signature, demo.config.whatsapp.appSecret)).toBe(true);
      expect(verifyMetaSignature(Buffer.from(JSON.stringify(JSON.parse(text))), signature, demo.config.whatsapp.appSecret)).toBe(false);
    } finally {
      demo.sandbox.deliverTo(`${demo.url}/webhook`);
      await capture.stop();
    }
  });

  it("a duplicate storm (every webhook delivered 5 times, two at once) gets one reply", async () => {
    await api("POST", "/demo/api/faults", { duplicates: true });
    const from = newPhone();
    const wamid = await write({ from, text: "Do you deliver to Porto?" });
    await eventually(async () => (await replies(from)).length > 0, "the reply");
    const deliveries = () => demo.sandbox.log.since(0).filter((e) => e.text.includes(`${wamid} (copy`) && e.text.includes("→ 200"));
    await eventually(() => deliveries().length === 5, "all five copies acknowledged");
    await untilQuiet({ queues: demo.queues }, { also: [demo] });
    expect(await replies(from)).toHaveLength(1);
    expect(demo.sandbox.graph.taken.filter((s) => s.to === from)).toHaveLength(1);
    expect(await demo.db.inboundMessage.count({ where: { wamid } })).toBe(1);
  });

  it("Meta refusing with 131047 puts the reply in the dead-letter queue; resent by staff, it arrives once", async () => {
    await api("POST", "/demo/api/faults", { send: "131047" });
    const from = newPhone();
    await write({ from, text: "Where is my order #4417?" });
    await eventually(async () => (await chat(from)).openDeadLetters === 1, "an open dead letter");
    const letter = await demo.db.deadLetter.findFirstOrThrow({ where: { state: "open", conversation: { contact: { waId: from } } } });
    expect(letter).toMatchObject({ source: "graph", code: "131047" });
    expect(await replies(from)).toHaveLength(0);
    const log = demo.sandbox.log.since(0).map((e) => e.text);
    expect(log).toContainEqual(expect.stringMatching(new RegExp(`Send to ${from}: .* → 400 \\(#131047\\), refused: not sent`)));

    await api("POST", "/demo/api/faults", { send: null });
    const resent = await fetch(`${demo.url}/admin/dlq/${letter.id}/retry`, {
      method: "POST",
      headers: { authorization: `Bearer ${demo.config.adminToken}`, "content-type": "application/json", "idempotency-key": `demo-retry-${letter.id}` },
      body: "{}",
    });
    expect(resent.status).toBeLessThan(300);
    const reply = await firstReply(from, "the resent reply");
    expect(reply.text).toContain("Where is my order #4417?");
    await untilQuiet({ queues: demo.queues }, { also: [demo] });
    expect(await replies(from)).toHaveLength(1);
    expect((await chat(from)).openDeadLetters).toBe(0);
  });

  it("staff resolve a 131047 item with one of the demo shop's approved templates, listed by its simulated Meta; it arrives once", async () => {
    await api("POST", "/demo/api/faults", { send: "131047" });
    const from = newPhone();
    await write({ from, text: "Is my order #4417 coming?" });
    await eventually(async () => (await chat(from)).openDeadLetters === 1, "an open dead letter");
    await api("POST", "/demo/api/faults", { send: null });
    const letter = await demo.db.deadLetter.findFirstOrThrow({ where: { state: "open", conversation: { contact: { waId: from } } } });
    const staff = (method: string, path: string, body?: unknown) =>
      fetch(`${demo.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${demo.config.adminToken}`, "content-type": "application/json", "idempotency-key": `demo-${letter.id}` },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    const listed = (await (await staff("GET", "/admin/templates")).json()) as { configured: boolean; templates: { name: string }[] };
    expect(listed.configured).toBe(true);
    expect(listed.templates.map((t) => t.name)).toEqual(["order_update", "we_are_here"]);
    const body = { name: "order_update", language: "en_US", parameters: ["Ana", "#4417"] };
    expect((await staff("POST", `/admin/dlq/${letter.id}/template`, body)).status).toBe(202);
    expect((await staff("POST", `/admin/dlq/${letter.id}/template`, body)).headers.get("idempotent-replayed")).toBe("true");
    await eventually(
      () =>
        demo.db.outboundMessage.findFirst({ where: { template: "order_update", sendState: "accepted", reply: { conversation: { contact: { waId: from } } } } }),
      "the template taken by the simulated Meta",
    );
    await untilQuiet({ queues: demo.queues }, { also: [demo] });
    expect(await replies(from)).toHaveLength(1);
  });

  it("Claude told to fail with 400 dead-letters the reply at once, without a draft", async () => {
    await api("POST", "/demo/api/faults", { claude: "400" });
    const from = newPhone();
    await write({ from, text: "Hello?" });
    await eventually(async () => (await chat(from)).openDeadLetters === 1, "an open dead letter");
    const letter = await demo.db.deadLetter.findFirstOrThrow({ where: { conversation: { contact: { waId: from } } }, include: { reply: true } });
    expect(letter).toMatchObject({ source: "anthropic", code: "400" });
    expect(letter.reply?.text).toBeNull();
  });

  it("a send that times out (Meta took it, answered too late) arrives once: its status webhook confirms it", async () => {
    await api("POST", "/demo/api/faults", { send: "timeout" });
    const from = newPhone();
    await write({ from, text: "What does it cost?" });
    await eventually(async () => (await replies(from)).length > 0, "the reply in the chat");
    await eventually(
      () => demo.sandbox.log.since(0).some((e) => e.text.includes(`Send to ${from}`) && e.text.includes("after the backend's timeout")),
      "the backend to give up waiting",
      10_000,
    );
    await api("POST", "/demo/api/faults", { send: null });
    await eventually(
      async () => (await demo.db.reply.findFirst({ where: { conversation: { contact: { waId: from } } } }))?.state === "sent",
      "the reply recorded as sent",
      15_000,
    );
    expect(await replies(from)).toHaveLength(1);
    expect(demo.sandbox.graph.taken.filter((s) => s.to === from)).toHaveLength(1);
  }, 30_000);

  it("statuses out of order never move the ticks backwards", async () => {
    await api("POST", "/demo/api/faults", { statusesOutOfOrder: true });
    const from = newPhone();
    await write({ from, text: "Thanks!" });
    const id = await eventually(async () => (await replies(from))[0]?.id, "the reply");
    const sentStatus = () => demo.sandbox.log.since(0).some((e) => e.text.startsWith(`Status "sent" of ${id}`) && e.text.includes("→ 200"));
    await eventually(sentStatus, "the late 'sent' status, last of the three");
    await untilQuiet({ queues: demo.queues }, { also: [demo] });
    expect((await replies(from))[0]!.status).toBe("read");
  });

  it("a long reply arrives in WhatsApp-sized parts, in order; a message written meanwhile makes the next reply quote its question", async () => {
    const from = newPhone();
    await write({ from, text: "Tell me the long story" });
    const parts = await eventually(async () => {
      const out = await replies(from);
      // Which part a message is shows once its wamid is recorded, a moment after Meta took it.
      return out.length === 2 && out.every((p) => p.part) ? out : undefined;
    }, "two parts, recorded");
    expect(parts.map((p) => p.part)).toEqual([
      { n: 1, of: 2 },
      { n: 2, of: 2 },
    ]);
    expect(parts.every((p) => p.text.length <= 4096)).toBe(true);
    expect(parts[0]!.text).toMatch(/^\(offline demo\) /);

    // The reply to A is held up (Meta answers 500); B arrives meanwhile: A's reply quotes A.
    await api("POST", "/demo/api/faults", { send: "500" });
    const a = await write({ from, text: "Price of the blue mug?" });
    await eventually(() => demo.sandbox.log.since(0).some((e) => e.text.includes(`Send to ${from}`) && e.text.includes("(#131000)")), "a 500");
    await write({ from, text: "And the red one?" });
    await api("POST", "/demo/api/faults", { send: null });
    const [quoting] = await eventually(async () => {
      const out = (await replies(from)).slice(2);
      return out.length >= 1 ? out : undefined;
    }, "A's reply");
    expect(quoting!.replyTo).toMatchObject({ id: a, text: "Price of the blue mug?" });
  }, 20_000);

  it("an image goes to the backend through Meta's media download; a location and a tapped button are answered too", async () => {
    const from = newPhone();
    const png = Buffer.from("iVBORw0KGgoAAAANSUhEUgAAAAQAAAAECAIAAAAmkwkpAAAAFklEQVR4nGP8z8DAwMDAxMDAwMDAAAANHQEDasKb6QAAAABJRU5ErkJggg==", "base64");
    await write({ from, image: { data: png.toString("base64"), mimeType: "image/png", caption: "Is this mug red?" } });
    const imageReply = await firstReply(from, "the image's reply");
    expect(imageReply.text).toContain("I received your image (image/png");
    expect(imageReply.text).toContain("Is this mug red?");
    expect(demo.sandbox.log.since(0).some((e) => e.text.startsWith("The backend fetched media") && e.text.endsWith("→ 200"))).toBe(true);
    const shown = (await chat(from)).messages[0] as ChatMessage & { media?: { url: string } };
    const file = await fetch(`${demo.url}${shown.media!.url}`);
    expect(Buffer.from(await file.arrayBuffer()).equals(png)).toBe(true);

    await write({ from, location: { latitude: 51.508, longitude: -0.128, name: "Trafalgar Square" } });
    await eventually(async () => (await replies(from)).some((r) => r.text.includes("Thanks for the location (Trafalgar Square")), "the location's reply");
    await write({ from, button: { id: "hours", title: "Opening hours" } });
    await eventually(
      async () => (await replies(from)).some((r) => r.text.includes('[Chose the option "Opening hours" (id hours)]') && r.text.includes("closed on Sundays")),
      "the button's reply",
    );
  });

  it("a voice note is heard by the offline transcriber and answered from its words, which the backend stores once", async () => {
    const from = newPhone();
    const wamid = await write({ from, voice: { says: "Are you open on Sunday?" } });
    const reply = await firstReply(from, "the voice note's reply");
    expect(reply.text).toContain("[Voice note] Are you open on Sunday?");
    expect(reply.text).toContain("closed on Sundays");
    expect((await chat(from)).messages.find((m) => m.id === wamid)).toMatchObject({ direction: "in", text: "Voice note" });
    const heard = demo.sandbox.log.since(0).filter((e) => e.kind === "transcriber");
    expect(heard.map((e) => e.text)).toEqual(["The offline transcriber heard voice.ogg (audio/ogg) say “Are you open on Sunday?”"]);
    expect(await demo.db.inboundMessage.findUniqueOrThrow({ where: { wamid } })).toMatchObject({ transcript: "Are you open on Sunday?" });
  });

  it("an order id is looked up in the demo shop's API with an Idempotency-Key, and the customer gets its status", async () => {
    const from = newPhone();
    await write({ from, text: "Where is my order A1001?" });
    const reply = await firstReply(from, "the order's reply");
    expect(reply.text).toContain("Order A1001 is shipped");
    const lookups = demo.sandbox.log.since(0).filter((e) => e.kind === "business" && e.text.includes("GET /orders/A1001"));
    expect(lookups).toHaveLength(1);
    expect(lookups[0]!.text).toMatch(/Idempotency-Key [0-9a-f]{12}…\) → 200/);
    const call = await demo.db.toolCall.findFirstOrThrow({ where: { input: { equals: { orderId: "A1001" } } } });
    expect(call).toMatchObject({ name: "lookup_order", state: "done", status: 200, attempts: 1 });
  });

  it("with the shop's API failing, the customer is told it could not be checked, and nothing is dead-lettered", async () => {
    const from = newPhone();
    await api("POST", "/demo/api/faults", { shop: "failing" });
    await write({ from, text: "Status of A1002 please" });
    const reply = await firstReply(from, "the order's reply");
    expect(reply.text).toContain("could not get that from the shop's system");
    expect(reply.text).toContain("HTTP 503");
    expect((await chat(from)).openDeadLetters).toBe(0);
  });

  it("a question the shop's knowledge answers is answered with a citation, stored with the reply", async () => {
    const from = newPhone();
    await write({ from, text: "Can I return shoes I bought?" });
    const reply = await firstReply(from, "the reply");
    expect(reply.text).toContain("You can return unworn shoes within 30 days of delivery for a full refund.");
    const stored = await demo.db.reply.findFirstOrThrow({ where: { text: reply.text } });
    expect(stored.citations).toEqual([
      expect.objectContaining({ source: "returns.md", citedText: "You can return unworn shoes within 30 days of delivery for a full refund." }),
    ]);
  });

  it("a customer known only by username and BSUID is answered at their BSUID", async () => {
    const userId = `US.${randomBytes(8).readBigUInt64BE().toString()}`;
    const created = await api("POST", "/demo/api/customers", { username: "@mika", userId });
    expect(created.status).toBe(201);
    await write({ userId, text: "hi" });
    await eventually(async () => (await replies(userId)).length > 0, "the reply");
    expect(demo.sandbox.graph.taken.find((s) => s.to === userId)).toMatchObject({ addressedBy: "bsuid" });
    expect(await demo.db.contact.findFirstOrThrow({ where: { userId } })).toMatchObject({ waId: null, username: "mika" });
  });

  it("the page's assets are served, and any other name is 404, even one every object has", async () => {
    const script = await fetch(`${demo.url}/demo/assets/chat.js`);
    expect(script.status).toBe(200);
    expect(script.headers.get("content-type")).toMatch(/^text\/javascript/);
    expect((await fetch(`${demo.url}/demo/assets/style.css`)).status).toBe(200);
    for (const name of ["constructor", "toString", "__proto__", "hasOwnProperty", "valueOf", "__defineGetter__", "nothing.js"]) {
      const res = await fetch(`${demo.url}/demo/assets/${name}`);
      expect(res.status, name).toBe(404);
      expect(await res.json(), name).toEqual({ error: "not found" });
    }
  });

  it("the JSON API says what is wrong with a request", async () => {
    expect((await api("POST", "/demo/api/messages", { text: "who am I?" })).body.error).toMatch(/give from/);
    expect((await api("POST", "/demo/api/messages", { from: "+44 7700", text: "x" })).status).toBe(400);
    expect((await api("POST", "/demo/api/messages", { from: newPhone(), text: "a", location: { latitude: 1, longitude: 2 } })).body.error).toMatch(
      /exactly one/,
    );
    expect((await api("POST", "/demo/api/faults", { send: "418" })).status).toBe(400);
    expect((await api("GET", "/demo/api/chats/0000000")).status).toBe(404);
    const page = await fetch(`${demo.url}/demo`);
    expect(page.headers.get("content-security-policy")).toContain("script-src 'self'");
    expect(await page.text()).not.toMatch(/<script(?![^>]*\bsrc=)/);
  });
});

describe("the demo stays a demo", () => {
  it("a second demo on the same schema refuses rather than empty the first one's database", async () => {
    const id = randomBytes(4).toString("hex");
    const first = await startDemo({ env: demoTestEnv(id) });
    try {
      await expect(startDemo({ env: demoTestEnv(id) })).rejects.toThrow(/another npm run demo is running on schema "t_demo_/);
      expect(first.sandbox.customers().length).toBeGreaterThan(0);
      expect(await first.db.staffMember.count()).toBe(1); // its schema is untouched
    } finally {
      await first.close();
      await removeDemoData(id);
    }
  });

  it("refuses to start when GRAPH_API_BASE_URL points anywhere but its own simulator", async () => {
    const env = { GRAPH_API_BASE_URL: "https://graph.facebook.com" };
    expect(() => demoSettings(env)).toThrow(DemoRefusal);
    expect(() => demoSettings(env)).toThrow(/talks only to its own simulated Meta.*graph\.facebook\.com/);
    await expect(startDemo({ env })).rejects.toThrow(DemoRefusal);
  });

  it("npm start's app has no demo routes", async () => {
    const h = await startHarness();
    try {
      expect((await h.app.inject({ method: "GET", url: "/demo" })).statusCode).toBe(404);
      expect((await h.app.inject({ method: "POST", url: "/demo/api/messages", payload: { from: "447700900123", text: "hi" } })).statusCode).toBe(404);
    } finally {
      await h.close();
    }
  });
});
