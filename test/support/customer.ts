import { expect } from "vitest";
import { eventually, type Harness } from "./harness.ts";
import { untilQuiet } from "./quiet.ts";
import { textWebhook } from "./webhook-bodies.ts";

/** A named customer writes; resolves once their words are bound to a reply and nothing is left to run. */
export async function saysAndIsAnswered(h: Harness, who: { phone: string; name: string }, text: string): Promise<void> {
  const { body, wamids } = textWebhook({ text, from: who.phone, name: who.name });
  expect((await h.deliver(body)).statusCode).toBe(200);
  await eventually(async () => (await h.db.inboundMessage.findUnique({ where: { wamid: wamids[0] } }))?.replyId, `"${text}" answered`);
  await untilQuiet(h);
}
