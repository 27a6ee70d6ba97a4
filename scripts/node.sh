#!/usr/bin/env bash
# Prints the bin directory of Node.js VERSION, fetching it first when it is not cached:
#   PATH="$(bash scripts/node.sh 24.22.3):$PATH" npx vitest run test/units.test.ts
# Our machines reach the npm registry only, and the registry carries Node itself as
# node-<os>-<arch> packages (the `node` package's own install script, which would pick one,
# is blocked by npm 11's policy). Only bin/node comes out of it; npm and npx stay the
# machine's, and run on whichever node is first on PATH. Cached under .cache/ (git ignores it).
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:?usage: scripts/node.sh VERSION (e.g. 24.22.3)}"
case "$(uname -m)" in
  x86_64) arch=x64 ;;
  aarch64) arch=arm64 ;;
  *) echo "[node] no node-linux-* package for $(uname -m)" >&2; exit 1 ;;
esac
dir=".cache/node-v$version-linux-$arch"
if [ ! -x "$dir/bin/node" ]; then
  echo "[node] fetching node-linux-$arch@$version from the npm registry" >&2
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  # npm pack checks the tarball against the registry's integrity hash.
  (cd "$tmp" && npm pack "node-linux-$arch@$version" --prefer-offline --silent >/dev/null)
  mkdir -p "$tmp/out"
  tar -xzf "$tmp"/node-linux-*.tgz -C "$tmp/out" package/bin/node package/LICENSE
  mkdir -p "$dir/bin"
  mv "$tmp/out/package/bin/node" "$dir/bin/node"
  mv "$tmp/out/package/LICENSE" "$dir/LICENSE"
fi
actual="$("$dir/bin/node" --version)"
if [ "$actual" != "v$version" ]; then echo "[node] $dir/bin/node is $actual, not v$version" >&2; exit 1; fi
echo "$PWD/$dir/bin"
