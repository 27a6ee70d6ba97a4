import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Processes the tests start run the compiled dist/, built here when src/ is newer.
    globalSetup: ["test/support/build.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Integration tests share one Redis and one Postgres (isolated by prefix and schema);
    // two files at a time suits the 2-core machines this runs on.
    maxWorkers: 2,
    reporters: ["default"],
  },
});
