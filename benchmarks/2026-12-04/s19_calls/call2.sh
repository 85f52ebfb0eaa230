#!/usr/bin/env bash
# Call 2 (nineteenth session): with DeepGEMM, the GPU tests of the custom ops (torch.compile: one graph, eager's
# bits), of the linear, quantizers (buffers now from contract), graph capture and DeepGEMM, and the engine's
# on-policy tests (rollout's no-grad forward skips the autograd Function now); then `precision bench ceiling` with
# the DeepGEMM family on the 8B shapes at 8192 and 16384 tokens.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
source benchmarks/2026-12-04/s19_calls/dg_setup.sh
T="timeout 250 python3 -m pytest -q -rf -m gpu -p no:cacheprovider"
$T tests/numerics/gpu/test_compile_gpu.py > "$OUT/test_compile.log" 2>&1 &
$T tests/numerics/gpu/test_linear_gpu.py tests/numerics/gpu/test_quant_gpu.py tests/numerics/gpu/test_graph_capture_gpu.py \
  tests/numerics/gpu/test_deep_gemm_gpu.py tests/numerics/gpu/test_gemm_gpu.py > "$OUT/test_numerics.log" 2>&1 &
$T tests/rl/gpu > "$OUT/test_engine.log" 2>&1 &
wait
for f in test_compile test_numerics test_engine; do
  echo "== $f"; grep -E "passed|failed|FAILED|Error" "$OUT/$f.log" | tail -n 6 | cut -c1-300
done
timeout 320 python3 -c "from precision_engine.cli.app import main; main()" bench ceiling \
  --out "$OUT/ceiling.json" > "$OUT/ceiling.txt" 2>&1
grep -v "^\[W\|Warning\|warn(\|run_backward" "$OUT/ceiling.txt" | tail -n 20 | cut -c1-400
