#!/usr/bin/env bash
# Call 1 (eighteenth session): the GPU tests the SplitSums removal (acfd7c2) never had (numerics, fused linear and
# quant, models; the engine's on-policy tests), while DeepGEMM builds from carried source and compiles its kernels;
# then dg_probe.py times DeepGEMM beside cuBLAS. The built module and JIT cache come back for the next call.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext DG_JIT_CACHE_DIR=/tmp/dgcache
D=benchmarks/2026-12-03/s18_calls
nvidia-smi -L; python3 -c "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__)"
( timeout 260 python3 $D/dg_build.py > "$OUT/dg_build.log" 2>&1 \
  && PYTHONPATH=/tmp/dg:$PYTHONPATH timeout 200 python3 $D/dg_probe.py --warm > "$OUT/dg_warm.log" 2>&1 ) &
BG=$!
timeout 330 python3 -m pytest -q -rf -m gpu -p no:cacheprovider tests/numerics/gpu tests/numerics/test_fused_linear.py \
  tests/numerics/test_fused_quant.py tests/models > "$OUT/test_numerics.log" 2>&1 &
T1=$!
timeout 240 python3 -m pytest -q -rf -m gpu -p no:cacheprovider tests/rl/gpu > "$OUT/test_engine.log" 2>&1 &
T2=$!
wait $T1 $T2 $BG
tail -n 3 "$OUT/dg_build.log"; tail -n 4 "$OUT/dg_warm.log"
if [ -f /tmp/dg/deep_gemm/_C.so ]; then
  PYTHONPATH=/tmp/dg:$PYTHONPATH timeout 200 python3 $D/dg_probe.py > "$OUT/dg_probe.txt" 2>&1
  grep -v "^\[W\|Warning\|warn(" "$OUT/dg_probe.txt" | tail -n 45 | cut -c1-330
  tar czf "$OUT/dg_built.tgz" -C /tmp dg/deep_gemm/_C.so dgcache 2>/dev/null
fi
echo "== tests"
grep -E "passed|failed|FAILED|Error" "$OUT/test_numerics.log" | tail -n 12 | cut -c1-300
grep -E "passed|failed|FAILED|Error" "$OUT/test_engine.log" | tail -n 6 | cut -c1-300
