#!/usr/bin/env bash
# npm run demo on a fresh clone: installs the dependencies the first time (nothing else to set
# up), generates the Prisma client when its schema changed, then runs the sandbox (sim/main.ts).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x node_modules/.bin/tsx ]; then
  echo "[demo] first run: installing dependencies (npm ci)"
  npm ci --no-audit --no-fund
fi
node scripts/build.mjs --if-stale --client-only
exec node_modules/.bin/tsx sim/main.ts
