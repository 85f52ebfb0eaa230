#!/usr/bin/env bash
# Forty-first session, call 3 (carry .whl and .dg): the first half of the fortieth session's
# `s40_calls/next/call_check.sh`: the GPU tests of tests/bench, then bench kernels, ceiling and ceiling --decode at
# their quick sizes, all moved onto `gemm.timed_turns` / `timed_where_they_run` without a device run (1e41b5c,
# b0204e9). bench linear's turns ran in call 1 (full size, both token counts).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
precision=(python3 -c "from precision_engine.cli.app import main; main()")
gpu_tests bench 150 tests/bench
for verb in kernels ceiling "ceiling --decode"; do
  name=${verb// /_}
  timeout 120 "${precision[@]}" bench $verb --quick --out "$OUT/$name.json" > "$OUT/$name.txt" 2>&1
  echo "bench $verb rc=$?"; tail -n 4 "$OUT/$name.txt" | cut -c1-200
done
