#!/usr/bin/env bash
# Call 1 (twentieth session): the nineteenth session's device outputs were lost with its machine, so its
# uncommitted work is checked again here. DeepGEMM rebuilt from source; with it, the torch.compile GPU tests, the
# numerics and engine GPU tests, and `precision bench ceiling` with the DeepGEMM family on the 8B shapes at 8192
# and 16384 tokens. (A first attempt of this call was cut off when the machine was taken back: no output.)
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
T="python3 -m pytest -q -rf -m gpu -p no:cacheprovider"
source benchmarks/2026-12-04/s20_calls/dg_setup.sh
python3 -c "from precision_engine.numerics.gemm import deep_gemm_available as d; print('deep_gemm importable', d())"
timeout 170 $T tests/numerics/gpu/test_compile_gpu.py > "$OUT/test_compile.log" 2>&1 &
timeout 170 $T tests/numerics/gpu/test_linear_gpu.py tests/numerics/gpu/test_quant_gpu.py \
  tests/numerics/gpu/test_graph_capture_gpu.py tests/numerics/gpu/test_deep_gemm_gpu.py \
  tests/numerics/gpu/test_gemm_gpu.py > "$OUT/test_numerics.log" 2>&1 &
timeout 170 $T tests/rl/gpu > "$OUT/test_engine.log" 2>&1 &
wait
for f in test_compile test_numerics test_engine; do
  echo "== $f"; grep -E "passed|failed|FAILED|Error" "$OUT/$f.log" | tail -n 6 | cut -c1-300
done
timeout 230 python3 -c "from precision_engine.cli.app import main; main()" bench ceiling \
  --out "$OUT/ceiling.json" > "$OUT/ceiling.txt" 2>&1
echo "ceiling rc=$?"
grep -v "^\[W\|Warning\|warn(\|run_backward" "$OUT/ceiling.txt" | tail -n 24 | cut -c1-400
