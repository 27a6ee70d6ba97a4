import type { Prisma } from "../generated/prisma/client.ts";

/**
 * Adds WhatsApp messages to a reply after any it already has: a part Meta accepted and later
 * reported failed stays as history, so new parts never reuse its number.
 */
export async function appendParts(
  tx: Prisma.TransactionClient,
  replyId: string,
  texts: string[],
  template?: string,
): Promise<void> {
  const last = await tx.outboundMessage.aggregate({ where: { replyId }, _max: { seq: true } });
  const first = (last._max.seq ?? -1) + 1;
  await tx.outboundMessage.createMany({
    data: texts.map((text, i) => ({ replyId, seq: first + i, text, ...(template ? { template } : {}) })),
  });
}
