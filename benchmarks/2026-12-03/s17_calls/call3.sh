#!/usr/bin/env bash
# Call 3 (seventeenth session, after the descriptor cache): host microseconds of each piece of an eager FP8
# linear step, the extension before the cache beside it; the wgrad
# algorithms round-robin; the block-scaled ceiling, quick.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
D=benchmarks/2026-12-03/s17_calls
timeout 200 python3 $D/host_pieces.py 2>&1 | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/host_pieces.txt"
timeout 200 python3 $D/wgrad_ab.py 2>&1 | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/wgrad_ab.txt"
timeout 200 python3 -c "from precision_engine.cli.app import main; main()" bench ceiling --quick --out "$OUT/ceiling_quick.json" 2>&1 \
  | grep -v "^\[W\|Warning\|warn(" | tail -n 4 | tee "$OUT/ceiling_quick.txt"
