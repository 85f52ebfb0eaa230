#!/usr/bin/env bash
# Thirty-sixth session (carry .whl and .dg; about 9 minutes): the batch-invariant causal attention's backward from
# the kernel's logsumexp (this tree) against recomputing the forward (`lse_backward_fits` forced off with sed):
#   1. probe_lse.py: bits, gradients against float64, attention fwd+bwd time at 8192 and 16384 tokens;
#   2. the 8B block in both modes, both trees (with DeepGEMM unless NO_DG=1);
#   3. the GPU tests of attention, the decoder and the engine on this tree (TESTS, TESTS_S to change them).
set -u
cd "$(dirname "$0")/../../.."
here=benchmarks/2026-12-06/s36_calls
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 python3 $here/probe_lse.py > "$OUT/probe.txt" 2>&1; echo "probe rc=$?"; tail -n 8 "$OUT/probe.txt"
[ -z "${NO_DG:-}" ] && source scripts/device_deep_gemm.sh
cp precision_engine/numerics/triton_attention.py /tmp/ta_lse.py
for tree in ${TREES:-recompute lse}; do
  cp /tmp/ta_lse.py precision_engine/numerics/triton_attention.py
  [ $tree = recompute ] && sed -i 's/if causal and lse_backward_fits(q, k, v):/if False:/' precision_engine/numerics/triton_attention.py
  timeout ${BLOCK_S:-140} python3 -c "from precision_engine.cli.app import main; main()" bench block --reps 10 \
    --policy bf16_baseline --policy jetrl_unified --out "$OUT/block_$tree.json" > "$OUT/block_$tree.txt" 2>&1
  echo "$tree rc=$?"; grep -E "^(bf16_baseline|jetrl_unified) +(fast|batch)|^target" "$OUT/block_$tree.txt" | cut -c1-160
done
cp /tmp/ta_lse.py precision_engine/numerics/triton_attention.py
gpu_tests tests_lse ${TESTS_S:-200} ${TESTS:-tests/numerics/gpu/test_triton_invariant_gpu.py tests/numerics/gpu/test_attention_quant_gpu.py tests/models tests/rl/gpu}
