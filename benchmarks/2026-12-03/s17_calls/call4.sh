#!/usr/bin/env bash
# Call 4 (seventeenth session): why fp8_bi's eager training step trails fp8_cublas's on 4096x4096 (eager_probe.py);
# the block-scaled ceiling on every 8B shape at 8192 tokens (bench_ceiling, as `precision bench ceiling` without
# its 16384-token rows).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
D=benchmarks/2026-12-03/s17_calls
timeout 200 python3 $D/eager_probe.py 2>&1 | grep -v "^\[W\|Warning\|warn(" > "$OUT/eager_probe.txt"
grep -A4 "fwd+bwd at 8192" "$OUT/eager_probe.txt"
timeout 330 python3 - <<'PY' 2>&1 | grep -v "^\[W\|Warning\|warn(" | tee "$OUT/ceiling_8192.txt"
import json, os
from precision_engine.bench import ceiling as C
from precision_engine.bench.gemm import SHAPES_8B, environment
rows = C.bench_ceiling(shapes=SHAPES_8B, ms=[8192], on_row=lambda r: print(C.format_row(r), flush=True))
json.dump({"environment": environment(), "rows": rows}, open(os.path.join(os.environ["OUT"], "ceiling_8192.json"), "w"),
          indent=1)
PY
