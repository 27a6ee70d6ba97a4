import { readFileSync } from "node:fs";
import helmet from "@fastify/helmet";
import type { FastifyInstance, FastifyPluginAsync } from "fastify";
import { z } from "zod";
import type { Db } from "../src/db/client.ts";
import { BSUID, type Customer, type CustomerMessage, DemoInputError, PHONE } from "./customers.ts";
import { faultsUpdate } from "./faults.ts";
import { spokenVoiceNote } from "./offline-transcriber.ts";
import { BUSINESS, type ChatEntry, MENU, type Sandbox } from "./sandbox.ts";

/**
 * The sandbox's page and JSON API, registered by sim/main.ts only (buildApp knows
 * nothing of it): `/demo`, the chat page; `POST /demo/api/messages`, a customer writes
 * (202: it is on its way to POST /webhook as Meta would deliver it); `GET /demo/api/chats/:from`,
 * the chat as the customer's phone shows it, with the delivery states the backend recorded.
 */

const read = (name: string) => readFileSync(new URL(`./page/${name}`, import.meta.url), "utf8");
/** A Map, not an object: a name from the URL such as `constructor` must not find Object.prototype's. */
const ASSETS = new Map<string, { type: string; body: string }>([
  ["chat.js", { type: "text/javascript; charset=utf-8", body: read("chat.js") }],
  ["style.css", { type: "text/css; charset=utf-8", body: read("style.css") }],
]);
const INDEX = read("index.html");

/** Meta takes images up to 5 MB (WHATSAPP.md §8); the backend reads PDFs up to MEDIA_MAX_BYTES, 5 MB too. */
const MAX_FILE_BYTES = 5 * 1024 * 1024;
const base64 = z.string().regex(/^[A-Za-z0-9+/]*={0,2}$/, { error: "data must be base64" });
const caption = z.string().trim().max(1024).optional();

const messageBody = z
  .object({
    from: z.string().regex(PHONE, { error: "from must be the customer's phone number, digits only" }).optional(),
    userId: z.string().regex(BSUID, { error: "userId must be a BSUID such as US.13491208655302741918" }).optional(),
    name: z.string().trim().min(1).max(80).optional(),
    username: z.string().trim().min(1).max(40).optional(),
    text: z.string().trim().min(1).max(4096).optional(),
    image: z
      .object({ data: base64, mimeType: z.enum(["image/jpeg", "image/png"]), caption })
      .strict()
      .optional(),
    document: z
      .object({ data: base64, mimeType: z.literal("application/pdf"), filename: z.string().trim().min(1).max(200), caption })
      .strict()
      .optional(),
    // A voice note that "says" these words: the offline transcriber hears them (sim/offline-transcriber.ts).
    voice: z
      .object({ says: z.string().trim().min(1).max(1000) })
      .strict()
      .optional(),
    location: z
      .object({
        latitude: z.number().min(-90).max(90),
        longitude: z.number().min(-180).max(180),
        name: z.string().max(100).optional(),
        address: z.string().max(200).optional(),
      })
      .strict()
      .optional(),
    button: z
      .object({ id: z.string().min(1).max(256), title: z.string().min(1).max(20) })
      .strict()
      .optional(),
    replyTo: z.string().min(1).max(200).optional(),
  })
  .strict()
  .refine((b) => b.from !== undefined || b.userId !== undefined, { error: "give from (a phone number) or userId (a BSUID)" })
  .refine((b) => [b.text, b.image, b.document, b.voice, b.location, b.button].filter((x) => x !== undefined).length === 1, {
    error: "give exactly one of text, image, document, voice, location or button",
  });

const customerBody = z
  .object({
    name: z.string().trim().min(1).max(80).optional(),
    phone: z.string().trim().max(30).optional(),
    username: z.string().trim().min(1).max(40).optional(),
    userId: z.string().trim().optional(),
  })
  .strict();

export interface DemoRoutesDeps {
  sandbox: Sandbox;
  db: Db;
  /** "offline": the offline responder, which the page may tell to fail; "anthropic": real Claude. */
  claude: "offline" | "anthropic";
  staffEmail: string;
}

const problem = (error: z.ZodError) => error.issues.map((i) => (i.path.length ? `${i.path.join(".")}: ${i.message}` : i.message)).join("; ");

export function demoRoutes(deps: DemoRoutesDeps): FastifyPluginAsync {
  return async (app: FastifyInstance) => {
    await securePage(app);
    pageRoutes(app, deps);
    customerRoutes(app, deps.sandbox);
    chatRoutes(app, deps);
    faultRoutes(app, deps);
  };
}

/** The page's scripts and styles come from here only: no inline script, no framing. */
async function securePage(app: FastifyInstance): Promise<void> {
  await app.register(helmet, {
    contentSecurityPolicy: {
      useDefaults: false,
      directives: {
        defaultSrc: ["'self'"],
        scriptSrc: ["'self'"],
        styleSrc: ["'self'"],
        imgSrc: ["'self'", "data:", "blob:"],
        connectSrc: ["'self'"],
        objectSrc: ["'none'"],
        baseUri: ["'none'"],
        formAction: ["'self'"],
        frameAncestors: ["'none'"],
      },
    },
    // The sandbox is served over plain http://127.0.0.1.
    hsts: false,
  });
}

/** The chat page itself, its assets, and what it shows before any chat: the business, its menu, who answers. */
function pageRoutes(app: FastifyInstance, deps: DemoRoutesDeps): void {
  app.get("/demo", async (_request, reply) => reply.type("text/html; charset=utf-8").header("cache-control", "no-store").send(INDEX));
  app.get<{ Params: { file: string } }>("/demo/assets/:file", async (request, reply) => {
    const asset = ASSETS.get(request.params.file);
    if (!asset) return reply.code(404).send({ error: "not found" });
    return reply.type(asset.type).header("cache-control", "no-cache").send(asset.body);
  });

  app.get("/demo/api/info", async () => ({
    business: BUSINESS,
    menu: MENU,
    claude: deps.claude,
    staff: { url: "/admin", email: deps.staffEmail },
  }));
}

/** The customers' side: who can write, and a customer writing (on its way to POST /webhook as Meta would deliver it). */
function customerRoutes(app: FastifyInstance, sandbox: Sandbox): void {
  app.get("/demo/api/customers", async () => ({ customers: sandbox.customers() }));
  app.post("/demo/api/customers", async (request, reply) => {
    const body = customerBody.safeParse(request.body ?? {});
    if (!body.success) return reply.code(400).send({ error: problem(body.error) });
    try {
      return reply.code(201).send({ customer: sandbox.addCustomer(body.data) });
    } catch (error) {
      if (error instanceof DemoInputError) return reply.code(400).send({ error: error.message });
      throw error;
    }
  });

  app.post("/demo/api/messages", { bodyLimit: 8 * 1024 * 1024 }, async (request, reply) => {
    const body = messageBody.safeParse(request.body ?? {});
    if (!body.success) return reply.code(400).send({ error: problem(body.error) });
    const b = body.data;
    const key = b.from ?? b.userId!;
    let message: CustomerMessage;
    try {
      if (!sandbox.customer(key)) sandbox.addCustomer({ name: b.name, phone: b.from, username: b.username, userId: b.userId });
      message = messageOf(b);
    } catch (error) {
      if (error instanceof DemoInputError) return reply.code(400).send({ error: error.message });
      throw error;
    }
    const entry = sandbox.write(key, message);
    return reply.code(202).send({ id: entry.id, chat: key });
  });
}

/** The chat as the customer's phone shows it, with the delivery states the backend recorded, and the files sent in it. */
function chatRoutes(app: FastifyInstance, deps: DemoRoutesDeps): void {
  const { sandbox } = deps;
  app.get<{ Params: { from: string } }>("/demo/api/chats/:from", async (request, reply) => {
    const key = request.params.from;
    const customer = sandbox.customer(key);
    const chat = sandbox.chat(key);
    if (!customer || !chat) return reply.code(404).send({ error: `no chat with ${key}` });
    return { customer, typing: chat.typing, openDeadLetters: await openDeadLetters(deps.db, customer), messages: await shown(deps.db, chat.entries) };
  });

  app.get<{ Params: { id: string } }>("/demo/api/media/:id", async (request, reply) => {
    const media = sandbox.media(request.params.id);
    if (!media) return reply.code(404).send({ error: "no such file (the demo keeps the last 50)" });
    return reply.type(media.mimeType).header("content-disposition", "inline").send(media.bytes);
  });
}

/** The page's fault switches, and the log of what the simulators did, which the page polls. */
function faultRoutes(app: FastifyInstance, deps: DemoRoutesDeps): void {
  const { sandbox } = deps;
  app.get("/demo/api/faults", async () => sandbox.faults);
  app.post("/demo/api/faults", async (request, reply) => {
    const update = faultsUpdate.safeParse(request.body ?? {});
    if (!update.success) return reply.code(400).send({ error: problem(update.error) });
    if (update.data.claude && deps.claude !== "offline")
      return reply.code(409).send({ error: "Claude is real in this run (ANTHROPIC_API_KEY is set): only the offline responder can be told to fail" });
    return sandbox.setFaults(update.data);
  });

  app.get<{ Querystring: { after?: string } }>("/demo/api/events", async (request) => {
    const after = Number(request.query.after ?? 0);
    return { events: sandbox.log.since(Number.isFinite(after) ? after : 0), last: sandbox.log.last, faults: sandbox.faults };
  });
}

function messageOf(b: z.infer<typeof messageBody>): CustomerMessage {
  const replyTo = b.replyTo ? { replyTo: b.replyTo } : {};
  const file = (data: string) => {
    const bytes = Buffer.from(data, "base64");
    if (bytes.length === 0) throw new DemoInputError("the file is empty");
    if (bytes.length > MAX_FILE_BYTES) throw new DemoInputError(`the file is ${bytes.length} bytes; WhatsApp images and the backend's media limit are 5 MB`);
    return bytes;
  };
  if (b.text !== undefined) return { text: b.text, ...replyTo };
  if (b.image)
    return { image: { bytes: file(b.image.data), mimeType: b.image.mimeType, ...(b.image.caption ? { caption: b.image.caption } : {}) }, ...replyTo };
  if (b.document) {
    const d = b.document;
    return { document: { bytes: file(d.data), mimeType: d.mimeType, filename: d.filename, ...(d.caption ? { caption: d.caption } : {}) }, ...replyTo };
  }
  if (b.voice) return { voice: { bytes: spokenVoiceNote(b.voice.says), mimeType: "audio/ogg; codecs=opus" }, ...replyTo };
  if (b.location) return { location: stripUndefined(b.location), ...replyTo };
  return { button: b.button! };
}

const stripUndefined = <T extends object>(value: T): T => Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;

/** Open dead letters of this customer: the page points at the staff page while there are any. */
function openDeadLetters(db: Db, customer: Customer): Promise<number> {
  return db.deadLetter.count({ where: { state: "open", conversation: { contact: customer.phone ? { waId: customer.phone } : { userId: customer.userId } } } });
}

/**
 * The chat as the page shows it. A reply's ticks are what the backend recorded from Meta's
 * status webhooks (sent < delivered < read, never backwards), not what the simulator emitted;
 * a long reply's parts say which part they are.
 */
async function shown(db: Db, entries: ChatEntry[]) {
  const outIds = entries.flatMap((e) => (e.direction === "out" ? [e.id] : []));
  const parts = outIds.length
    ? await db.outboundMessage.findMany({
        where: { wamid: { in: outIds } },
        select: { wamid: true, status: true, seq: true, reply: { select: { parts: { select: { seq: true }, orderBy: { seq: "asc" } } } } },
      })
    : [];
  const byWamid = new Map(parts.map((p) => [p.wamid, p]));
  const textOf = (id: string) => (id === MENU.wamid ? { id, direction: "out", text: MENU.text } : entries.find((e) => e.id === id));
  return entries.map((e) => {
    const quoted = e.replyTo ? textOf(e.replyTo) : undefined;
    const common = {
      id: e.id,
      direction: e.direction,
      text: e.text,
      at: e.at,
      ...(quoted ? { replyTo: { id: quoted.id, direction: quoted.direction, text: quoted.text } } : {}),
    };
    if (e.direction === "in") {
      return {
        ...common,
        type: e.type,
        status: e.status,
        ...(e.media ? { media: { ...e.media, url: `/demo/api/media/${encodeURIComponent(e.media.id)}` } } : {}),
      };
    }
    const part = byWamid.get(e.id);
    const seqs = part?.reply.parts.map((p) => p.seq) ?? [];
    return {
      ...common,
      type: "text",
      // Meta took it; no status webhook recorded yet.
      status: part?.status ?? "accepted",
      ...(seqs.length > 1 && part ? { part: { n: seqs.indexOf(part.seq) + 1, of: seqs.length } } : {}),
    };
  });
}
