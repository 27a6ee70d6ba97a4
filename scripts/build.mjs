// npm run build: src/ compiled to dist/ (tsconfig.build.json), the files beside the sources
// that the code reads at run time (the staff page)
// copied next to them, so dist/ runs on plain node: npm start, the image, the worker child.
// dist/ is made afresh each time, so nothing deleted from src/ lingers in it. Types are
// checked by npm test (tsc --noEmit), not here: the build only has to emit.
import { spawnSync } from "node:child_process";
import { cpSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");

rmSync(`${root}/dist`, { recursive: true, force: true });
const compiled = spawnSync(process.execPath, [tsc, "-p", `${root}/tsconfig.build.json`, "--noCheck"], { stdio: "inherit" });
if (compiled.status !== 0) process.exit(compiled.status ?? 1);
cpSync(`${root}/src`, `${root}/dist`, { recursive: true, filter: (path) => !path.endsWith(".ts") });
