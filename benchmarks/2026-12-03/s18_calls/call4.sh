#!/usr/bin/env bash
# Call 4 (eighteenth session): AUTO launching DeepGEMM (fprop above decode sizes, dgrad) with the module call 3
# built with the system g++ (dynamic libstdc++) and call 3's JIT cache: the DeepGEMM GPU tests and the engine's
# on-policy tests, then `precision bench linear` at 8192 tokens, fp8_bi (AUTO: DeepGEMM) beside fp8_cublas.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
mkdir -p /tmp/dgsys && tar xzf .dg/deepgemm_src.tar.gz -C /tmp/dgsys --strip-components=1
for sub in cute cutlass; do ln -sfn /tmp/dgsys/third-party/cutlass/include/$sub /tmp/dgsys/deep_gemm/include/$sub; done
tar xzf .dg/dgsys.tgz -C /tmp && tar xzf .dg/dgcache.tgz -C /tmp
export PYTHONPATH=/tmp/dgsys:$PYTHONPATH DG_JIT_CACHE_DIR=/tmp/dgcache TORCH_EXTENSIONS_DIR=/tmp/torch_ext
python3 -c "from precision_engine.numerics.gemm import deep_gemm_available as d; print('deep_gemm importable', d())"
timeout 150 python3 -m pytest -q -rf -m gpu -p no:cacheprovider tests/numerics/gpu/test_deep_gemm_gpu.py \
  > "$OUT/test_deep_gemm.log" 2>&1 &
timeout 150 python3 -m pytest -q -rf -m gpu -p no:cacheprovider tests/rl/gpu > "$OUT/test_engine.log" 2>&1 &
wait
grep -E "passed|failed|FAILED|Error|skipped" "$OUT/test_deep_gemm.log" | tail -n 8 | cut -c1-300
grep -E "passed|failed|FAILED|Error" "$OUT/test_engine.log" | tail -n 5 | cut -c1-300
timeout 210 python3 -c "from precision_engine.cli.app import main; main()" bench linear --tokens 8192 \
  --variants bf16,fp8_cublas,fp8_bi --out "$OUT/bench_linear.json" > "$OUT/bench_linear.txt" 2>&1
grep -v "^\[W\|Warning\|warn(" "$OUT/bench_linear.txt" | tail -n 30 | cut -c1-260
