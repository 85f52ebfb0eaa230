#!/usr/bin/env bash
# Call 2 (seventeenth session): cuBLASLt configurations beyond the heuristic's; _scaled_mm vs the pinned call on
# one algorithm, interleaved; the Gluon GEMM on the wgrad pair.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
D=benchmarks/2026-12-03/s17_calls
timeout 400 python3 $D/explore_probe.py 2>&1 | grep -v "^\[W\|Warning\|warn(" > "$OUT/explore_probe.txt"
tail -n 60 "$OUT/explore_probe.txt"
