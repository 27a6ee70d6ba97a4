import { Queue, Worker } from "bullmq";
import { Redis } from "ioredis";
import pg from "pg";
import { request } from "undici";
import type { InboundJobData, ReplyJobData } from "../src/queue/catalog.ts";
import { loadSettings } from "../src/settings.ts";

/**
 * Issue 22's floor worker: a bare BullMQ worker doing the text path's I/O and nothing else, so
 * that benchmark 2 can read the real worker's replies/s as a share of what the same I/O costs
 * on the same machine in the same run. It takes the inbound jobs the webhook queued, on the
 * same queues, and answers them with six SQL statements per answered message (inbound 2 here,
 * reply 4), what the real worker issued when the floor was written (it now issues 9, 1 + 8:
 * the cost ledger's reservation and settle, and the conversation's place in the list), on the same
 * schema, and one Claude-shaped and one Graph-shaped HTTP call to the same fakes.
 *
 * What it leaves out is the real worker's cost beyond that I/O: job validation, contact
 * identity, debounce, the fence's checks, history, prompt building, the Anthropic SDK, message
 * splitting, mark-read, logs, metrics and traces. No retries: a failure fails the job, which
 * the bench counts. It is a floor, not a second implementation.
 *
 * Run as the real worker is, configured by its environment only:
 * `node --import tsx bench/floor-worker.ts` (bench/node-process.ts).
 */

const config = loadSettings(process.env);
if (config.redis.kind !== "single") throw new Error("the floor worker runs on one Redis (REDIS_URL)");

// Prisma's `?schema=` is not the driver's: the tables are found through the search path, as src/db/client.ts does.
const url = new URL(config.databaseUrl);
const schema = url.searchParams.get("schema");
url.searchParams.delete("schema");
const pool = new pg.Pool({
  connectionString: url.toString(),
  max: config.databasePoolSize,
  ...(schema ? { options: `-c search_path="${schema.replaceAll('"', '""')}"` } : {}),
});

// BullMQ needs maxRetriesPerRequest null on a worker's connections.
const connection = new Redis(config.redis.url, { maxRetriesPerRequest: null });
const prefix = config.queuePrefix;
const replies = new Queue<ReplyJobData>("reply", { connection, prefix });

/** Named, so each connection plans a statement once and then only binds it, as the real worker's are (src/db/client.ts). */
async function sql<Row extends pg.QueryResultRow>(name: string, text: string, values: unknown[]): Promise<Row[]> {
  return (await pool.query<Row>({ name: `floor_${name}`, text, values })).rows;
}

async function inbound(data: InboundJobData): Promise<void> {
  const { message } = data;
  const waId = data.sender?.waId ?? message.from;
  if (!waId || !message.text) throw new Error(`the floor answers text from a phone number only (message ${message.id})`);
  const sentAt = new Date(Number(message.timestamp) * 1000);
  // 1. The contact and its conversation, created on first contact; the window extends to the message's time.
  const [conversation] = await sql<{ id: string }>(
    "conversation",
    `WITH contact AS (
       INSERT INTO contacts AS ct (id, wa_id, name, updated_at) VALUES (gen_random_uuid(), $1, $2, now())
       ON CONFLICT (wa_id) DO UPDATE SET name = COALESCE(EXCLUDED.name, ct.name), updated_at = now()
       RETURNING ct.id)
     INSERT INTO conversations AS c (id, phone_number_id, contact_id, last_inbound_at, updated_at)
     SELECT gen_random_uuid(), $3, contact.id, $4, now() FROM contact
     ON CONFLICT (phone_number_id, contact_id) DO UPDATE SET last_inbound_at = GREATEST(c.last_inbound_at, EXCLUDED.last_inbound_at)
     RETURNING c.id`,
    [waId, data.sender?.name ?? data.contactName ?? null, data.phoneNumberId, sentAt],
  );
  if (!conversation) throw new Error(`message ${message.id}: no conversation`);
  // 2. The message, once: its wamid is UNIQUE, so a redelivered job stores nothing.
  await sql(
    "message",
    `INSERT INTO inbound_messages (id, wamid, conversation_id, type, text, arrival, sent_at, payload)
     VALUES (gen_random_uuid(), $1, $2, $3, $4, $5, $6, $7::jsonb) ON CONFLICT (wamid) DO NOTHING`,
    [message.id, conversation.id, message.type, message.text.body, data.arrival ?? null, sentAt, JSON.stringify(message)],
  );
  await replies.add("reply", { conversationId: conversation.id }, { removeOnComplete: { age: 3600, count: 1000 }, removeOnFail: { age: 7 * 24 * 3600 } });
}

interface Pending {
  phoneNumberId: string;
  waId: string;
  messageId: string;
  text: string;
}

async function reply({ conversationId }: ReplyJobData): Promise<void> {
  // 3. Take the conversation (raise its fence, law 8) and read what it has not had answered.
  const pending = await sql<Pending>(
    "take",
    `WITH taken AS (UPDATE conversations SET reply_fence = reply_fence + 1, updated_at = now() WHERE id = $1 RETURNING id, phone_number_id, contact_id)
     SELECT taken.phone_number_id AS "phoneNumberId", ct.wa_id AS "waId", m.id AS "messageId", m.text
     FROM taken JOIN contacts ct ON ct.id = taken.contact_id
     JOIN inbound_messages m ON m.conversation_id = taken.id AND m.reply_id IS NULL AND m.skip_reason IS NULL
     ORDER BY m.sent_at`,
    [conversationId],
  );
  const first = pending[0];
  if (!first) return; // answered already (a redelivered job)
  // 4. The reply, stored before Claude is asked (law 4), and the messages bound to it.
  const [made] = await sql<{ id: string }>(
    "bind",
    `WITH made AS (INSERT INTO replies (id, conversation_id, updated_at) VALUES (gen_random_uuid(), $1, now()) RETURNING id)
     UPDATE inbound_messages SET reply_id = made.id FROM made WHERE inbound_messages.id = ANY($2::uuid[]) RETURNING made.id`,
    [conversationId, pending.map((p) => p.messageId)],
  );
  if (!made) throw new Error(`conversation ${conversationId}: no reply was made`);
  const answer = await askClaude(pending.map((p) => p.text).join("\n"));
  // 5. Claude's words and the one WhatsApp message they make, marked as being sent before the send (law 5).
  const [part] = await sql<{ id: string }>(
    "store",
    `WITH stored AS (UPDATE replies SET state = 'ready', text = $2, model = $3, input_tokens = $4, output_tokens = $5, updated_at = now() WHERE id = $1 RETURNING id)
     INSERT INTO outbound_messages (id, reply_id, seq, text, send_state, send_attempt) SELECT gen_random_uuid(), stored.id, 0, $2, 'sending', 1 FROM stored
     RETURNING id`,
    [made.id, answer.text, answer.model, answer.inputTokens, answer.outputTokens],
  );
  if (!part) throw new Error(`reply ${made.id}: no part was stored`);
  const wamid = await sendText(first.phoneNumberId, first.waId, answer.text);
  // 6. Meta took it: the part accepted with its wamid, the reply sent.
  await sql(
    "accept",
    `WITH accepted AS (UPDATE outbound_messages SET send_state = 'accepted', wamid = $2, accepted_at = now() WHERE id = $1 RETURNING reply_id)
     UPDATE replies SET state = 'sent', sent_at = now(), updated_at = now() FROM accepted WHERE replies.id = accepted.reply_id`,
    [part.id, wamid],
  );
}

/** One POST to the Messages API, in Anthropic's shape; undici's request keeps its connections alive. */
async function askClaude(text: string): Promise<{ text: string; model: string; inputTokens: number; outputTokens: number }> {
  const { anthropic } = config;
  const response = await request(`${anthropic.baseUrl}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": anthropic.apiKey, "anthropic-version": "2023-06-01" },
    body: JSON.stringify({
      model: anthropic.model,
      max_tokens: anthropic.maxTokens,
      system: anthropic.systemPrompt,
      messages: [{ role: "user", content: text }],
    }),
  });
  const body = (await response.body.json()) as {
    model: string;
    content: { type: string; text?: string }[];
    usage: { input_tokens: number; output_tokens: number };
  };
  if (response.statusCode !== 200) throw new Error(`Claude answered ${response.statusCode}`);
  const words = body.content.map((b) => b.text ?? "").join("");
  return { text: words, model: body.model, inputTokens: body.usage.input_tokens, outputTokens: body.usage.output_tokens };
}

/** One POST to the Graph API's messages endpoint, as src/whatsapp/graph-client.ts sends a text; Meta's wamid back. */
async function sendText(phoneNumberId: string, to: string, text: string): Promise<string> {
  const { whatsapp } = config;
  const response = await request(`${whatsapp.graphBaseUrl}/${whatsapp.graphVersion}/${phoneNumberId}/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${whatsapp.accessToken}` },
    body: JSON.stringify({ messaging_product: "whatsapp", recipient_type: "individual", to, type: "text", text: { preview_url: false, body: text } }),
  });
  const body = (await response.body.json()) as { messages?: { id: string }[] };
  const wamid = body.messages?.[0]?.id;
  if (response.statusCode !== 200 || !wamid) throw new Error(`Graph answered ${response.statusCode}`);
  return wamid;
}

const workers = [
  new Worker<InboundJobData>("inbound", (job) => inbound(job.data), { connection, prefix, concurrency: config.jobs.inboundConcurrency }),
  new Worker<ReplyJobData>("reply", (job) => reply(job.data), { connection, prefix, concurrency: config.jobs.replyConcurrency }),
];
for (const worker of workers) worker.on("failed", (job, error) => console.error(`floor: job ${job?.id ?? "?"} failed: ${error.message}`));
console.log(`floor: ready (inbound ${config.jobs.inboundConcurrency}, reply ${config.jobs.replyConcurrency}, pool ${config.databasePoolSize})`);

// SIGTERM as the real worker takes it: finish what runs, close, exit 0.
process.once("SIGTERM", () => {
  Promise.all(workers.map((w) => w.close()))
    .then(() => Promise.all([replies.close(), pool.end()]))
    .then(() => connection.quit())
    .then(
      () => process.exit(0),
      (error: unknown) => {
        console.error(error);
        process.exit(1);
      },
    );
});
