#!/usr/bin/env bash
# Validates kvroute on real compute: 4 gpu-workers (llama-3.2-1b, random weights) sharing one
# GPU, the router in front, one worker's calibration as the simulator's cost profile, then
# `kvroute-sim validate` for seed-sequential and agentic under round_robin and prefix_match.
# Every JSON/HTML report, the sent requests, worker/router logs and metrics go under $OUT.
#
# On the GPU machine (python3 + torch + CUDA, no node, no network), with `.device/` carried
# (built here by apps/gpu-worker/device/prepare.sh):
#     bash apps/gpu-worker/device/validate.sh            # ~5-6 min on one H200
# CPU dry run with the tiny shape (uses the local node when .device/ has no node.xz):
#     DEVICE=cpu OUT=/tmp/kv-out bash apps/gpu-worker/device/validate.sh
# Knobs (env): DEVICE=cuda|cpu, OUT, DEVICE_DIR (default <repo>/.device), WORKERS, SHAPE,
# POLICIES, SCENARIOS, DEADLINE_S, SEQ_ARGS, AGENTIC_ARGS, WORKER_ARGS, PROBE_ARGS (see validate.py).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
py=""
for cand in python3 /usr/bin/python3; do
  if "$cand" -c 'import torch' >/dev/null 2>&1; then py="$cand"; break; fi
done
if [ -z "$py" ]; then echo "validate.sh: no python3 with torch found" >&2; exit 2; fi
exec "$py" "$here/validate.py" "$@"
