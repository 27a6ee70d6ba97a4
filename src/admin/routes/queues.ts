import { createBullBoard } from "@bull-board/api";
import { BullMQAdapter } from "@bull-board/api/bullMQAdapter";
import { FastifyAdapter } from "@bull-board/fastify";
import type { FastifyInstance } from "fastify";
import type { Queues } from "../../queue/queues.ts";

/**
 * BullMQ's own queues through bull-board, behind the same sign-in, for operators only: job
 * payloads carry message text and phone numbers. Read-only: its buttons (retry, clean,
 * promote, remove) send no X-CSRF-Token, so a session could not use them anyway, and
 * resending belongs to the dead-letter routes, which keep the send-once guarantees.
 */
export async function registerQueueBoard(scope: FastifyInstance, queues: Queues): Promise<void> {
  const board = new FastifyAdapter();
  board.setBasePath("/admin/queues");
  createBullBoard({
    queues: Object.values(queues).map((queue) => new BullMQAdapter(queue, { readOnlyMode: true })),
    serverAdapter: board,
  });
  await scope.register(async (operatorsOnly) => {
    operatorsOnly.addHook("onRequest", async (request, reply) => {
      if (!request.operator) return reply.code(403).send({ error: "the queues are for operators" });
    });
    await operatorsOnly.register(board.registerPlugin(), { prefix: "/admin/queues" });
  });
}
