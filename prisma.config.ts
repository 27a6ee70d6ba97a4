import { defineConfig } from "prisma/config";

// Only `prisma generate` runs here (TOOLCHAIN.md); migrations are applied by src/db/migrate.ts.
export default defineConfig({
  schema: "prisma/schema.prisma",
  migrations: { path: "prisma/migrations" },
});
