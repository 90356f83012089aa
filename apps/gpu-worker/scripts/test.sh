#!/usr/bin/env bash
# Runs the worker's pytest suite on CPU with whichever python3 has torch and pytest
# (Debian's /usr/bin/python3 with python3-torch, or the one on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
py=""
for cand in python3 /usr/bin/python3; do
  if "$cand" -c 'import torch, pytest' >/dev/null 2>&1; then py="$cand"; break; fi
done
if [ -z "$py" ]; then
  echo "gpu-worker tests need torch and pytest: apt-get install python3-torch python3-pytest" >&2
  exit 1
fi
args=(-q -p no:cacheprovider tests)
if [ -n "${KVROUTE_TEST_REPORT_DIR:-}" ]; then args+=(--junitxml="$KVROUTE_TEST_REPORT_DIR/pytest-gpu-worker.xml"); fi
exec "$py" -m pytest "${args[@]}"
