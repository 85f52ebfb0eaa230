#!/usr/bin/env bash
# Call 2 (thirteenth session): the linear and fused-linear GPU tests with the word-packed Q(W)^T; where a training
# step's time goes (host issue, GPU span, gaps, per kernel) ours beside torchao; `bench linear --quick` beside
# torchao in the same process.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/numerics/gpu/test_linear_gpu.py \
  tests/numerics/test_fused_linear.py tests/numerics/gpu/test_graph_capture_gpu.py 2>&1 \
  | grep -E "passed|failed|FAILED|Error" | tail -n 12
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout 360 python3 benchmarks/2026-12-03/s13_calls/step_timeline.py "$OUT" 2>&1 \
  | grep -v "^\[W\|Warning\|warn(" > "$OUT/step_timeline.txt"
echo "timeline rc=$?"; tail -n 75 "$OUT/step_timeline.txt"
