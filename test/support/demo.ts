import { Redis } from "ioredis";
import { dropSchema, TEST_DATABASE_URL, TEST_REDIS_URL, withSchema } from "./harness.ts";

/** A demo (sim/) of the test's own: its Postgres schema, its Redis prefix, any free port. */
export function demoTestEnv(id: string): Record<string, string> {
  return {
    DEMO_DATABASE_URL: withSchema(TEST_DATABASE_URL, `t_demo_${id}`),
    DEMO_REDIS_URL: TEST_REDIS_URL,
    DEMO_QUEUE_PREFIX: `{t-demo-${id}}`,
    DEMO_PORT: "0",
    LOG_LEVEL: "silent",
  };
}

/** What a demo started with demoTestEnv(id) left in Postgres and Redis. */
export async function removeDemoData(id: string): Promise<void> {
  await dropSchema(`t_demo_${id}`);
  const redis = new Redis(TEST_REDIS_URL);
  let cursor = "0";
  do {
    const [next, keys] = await redis.scan(cursor, "MATCH", `{t-demo-${id}}*`, "COUNT", 500);
    if (keys.length) await redis.del(...keys);
    cursor = next;
  } while (cursor !== "0");
  await redis.quit();
}
