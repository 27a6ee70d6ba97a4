import type { FastifyInstance, FastifyPluginAsync } from "fastify";
import type { Db } from "../db/client.ts";
import type { RedisClient } from "../queue/redis.ts";

export function healthRoutes(deps: { redis: RedisClient; db: Db }): FastifyPluginAsync {
  return async (app: FastifyInstance) => {
    app.get("/healthz", async () => ({ ok: true }));

    app.get("/readyz", async (_request, reply) => {
      const [redis, postgres] = await Promise.all([
        deps.redis.ping().then(
          () => true,
          () => false,
        ),
        deps.db.$queryRaw`SELECT 1`.then(
          () => true,
          () => false,
        ),
      ]);
      return reply.code(redis && postgres ? 200 : 503).send({ ok: redis && postgres, redis, postgres });
    });
  };
}
