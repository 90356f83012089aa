#!/usr/bin/env bash
# Runs the worker's pytest suite on CPU with whichever python3 has torch, pytest, pyzmq and
# msgpack (Debian's /usr/bin/python3 once python3-torch, python3-pytest, python3-zmq and
# python3-msgpack are installed, or the one on PATH). On a machine without them it installs
# them when it can (root with apt-get), so `pnpm test` sets itself up; where it cannot, it says
# so loudly: CI fails, elsewhere the suite is reported as NOT RUN (never a silent pass).
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS="python3-torch python3-pytest python3-zmq python3-msgpack"
find_python() {
  for cand in python3 /usr/bin/python3; do
    if "$cand" -c 'import torch, pytest, zmq, msgpack' >/dev/null 2>&1; then echo "$cand"; return; fi
  done
}
py="$(find_python)"
if [ -z "$py" ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  log="${TMPDIR:-/tmp}/kvroute-gpu-worker-apt.log"
  echo "gpu-worker: installing $PKGS with apt-get for the Python tests (a few minutes; log: $log)"
  if (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $PKGS) >"$log" 2>&1; then
    py="$(find_python)"
  else
    echo "gpu-worker: apt-get install failed (see $log)" >&2
  fi
fi
if [ -z "$py" ]; then
  msg="gpu-worker Python tests NOT RUN: no python3 with torch, pytest, zmq and msgpack (apt-get install $PKGS, as root)"
  echo "" >&2
  echo "!!! $msg" >&2
  echo "" >&2
  if [ "${CI:-}" = "true" ]; then exit 1; fi
  exit 0
fi
args=(-q -p no:cacheprovider tests)
if [ -n "${KVROUTE_TEST_REPORT_DIR:-}" ]; then args+=(--junitxml="$KVROUTE_TEST_REPORT_DIR/pytest-gpu-worker.xml"); fi
exec "$py" -m pytest "${args[@]}"
