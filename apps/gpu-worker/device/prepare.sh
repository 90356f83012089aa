#!/usr/bin/env bash
# Runs on a machine WITH node + pnpm (a dev machine, CI): builds the carry folder that
# validate.sh needs on a GPU machine that has python3 + torch but no node and no network.
#
#   .device/node.xz            this machine's node binary, xz-compressed (Node 20)
#   .device/kvroute-router.mjs the router as one esbuild bundle (pnpm --filter @kvroute/router bundle)
#   .device/kvroute-sim.mjs    the sim CLI (packages/sim/src/cli.ts) as one esbuild bundle
#   .device/kvroute-validate.mjs  the validate CLI (packages/validate/src/cli.ts), which
#                              `kvroute-sim validate` runs when it lies beside kvroute-sim.mjs
#
# Env: DEVICE_DIR (default <repo>/.device), SKIP_NODE=1 to leave out node.xz (CPU dry runs use
# the local node, and compressing 100 MB takes a while on 2 cores).
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
dest="${DEVICE_DIR:-$root/.device}"
mkdir -p "$dest"
cd "$root"

# ESM bundles still meet CommonJS packages that call require(); give them one.
banner="import{createRequire as __kvrouteRequire}from'module';const require=__kvrouteRequire(import.meta.url);"

echo "prepare: bundling the router" >&2
# The router's own `bundle` script (pnpm --filter @kvroute/router bundle), pointed at $dest
# instead of apps/router/bundle.
bundle_cmd="$(node -p "require('./apps/router/package.json').scripts.bundle")"
case "$bundle_cmd" in
  *--outfile=bundle/kvroute-router.mjs*) ;;
  *) echo "prepare: apps/router's bundle script changed shape: $bundle_cmd" >&2; exit 1 ;;
esac
bundle_cmd="${bundle_cmd/--outfile=bundle\/kvroute-router.mjs/--outfile=$dest/kvroute-router.mjs}"
(cd apps/router && eval "pnpm exec $bundle_cmd --log-level=warning")

echo "prepare: bundling the sim CLI" >&2
# esbuild is the router's devDependency; run it from there with paths relative to apps/router.
(cd apps/router && pnpm exec esbuild ../../packages/sim/src/cli.ts --bundle --platform=node --format=esm \
  --target=node20 --conditions=@kvroute/source --log-level=warning --outfile="$dest/kvroute-sim.mjs" "--banner:js=$banner")
(cd apps/router && pnpm exec esbuild ../../packages/validate/src/cli.ts --bundle --platform=node --format=esm \
  --target=node20 --conditions=@kvroute/source --log-level=warning --outfile="$dest/kvroute-validate.mjs" "--banner:js=$banner")

if [ "${SKIP_NODE:-0}" != "1" ]; then
  node_bin="$(command -v node)"
  major="$("$node_bin" -p 'process.versions.node.split(".")[0]')"
  if [ "$major" != "20" ]; then echo "prepare: warning: node is v$major, validate.sh expects Node 20" >&2; fi
  echo "prepare: compressing $node_bin" >&2
  xz -T2 -6 -c "$node_bin" > "$dest/node.xz.tmp"
  mv "$dest/node.xz.tmp" "$dest/node.xz"
fi

# The bundles must run with plain node and no node_modules anywhere up the tree.
check="$(mktemp -d /tmp/kvroute-bundle-check.XXXXXX)"
cp "$dest/kvroute-sim.mjs" "$dest/kvroute-validate.mjs" "$dest/kvroute-router.mjs" "$check/"
(cd "$check" && node kvroute-sim.mjs --help >/dev/null && node kvroute-sim.mjs validate --help >/dev/null \
  && node kvroute-router.mjs --help >/dev/null) || {
  echo "prepare: a bundle does not run outside the repo (see $check)" >&2
  exit 1
}
rm -rf "$check"
du -sh "$dest"/* >&2
echo "prepare: ready in $dest" >&2
