import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";

/** Every source file (.ts, .js) under `dir`, the generated Prisma client left out: what the source-reading tests read. */
export function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return name === "generated" ? [] : sources(path);
    return /\.(ts|js)$/.test(name) ? [path] : [];
  });
}
