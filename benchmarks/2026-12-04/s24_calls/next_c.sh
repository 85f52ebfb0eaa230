#!/usr/bin/env bash
# Prepared in the twenty-fourth session, for the next one: the whole linear's decode at the target's M range, after
# next_a.sh / next_b.sh have picked `chain_config`'s rule (set it first) and, where fused_probe.py found the one
# launch faster, `one_launch_linear.patch` is applied (its GPU test runs here; without the patch it is not
# collected). The configs the rule picks passed their bits in A's probe, against pinned cuBLAS. TOKENS (default
# 1,16,32,48,64: 40 rows, about 4-5 minutes of bench) picks the M; a second call with TOKENS=8,24,40,56 covers
# the rest of 1..64. Timeouts: 590 s in all.
# The twenty-fifth session (no device either) moved Triton kernels without a GPU: split-K's fused segment sum into
# one helper (`triton_gemm._sum_if_last`) and triton_invariant's kernels into one module per op. Their GPU tests
# run first here (the split and fused sums, the invariant linear, attention, norms, RoPE).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
T="python3 -m pytest -q -rf -p no:cacheprovider"
timeout 80 $T -m gpu tests/numerics/gpu/test_gemm_gpu.py -k "triton_launch_choices or triton_invariant_gpu or rope_qk_gpu" \
  tests/numerics/gpu/test_triton_invariant_gpu.py tests/numerics/gpu/test_rope_qk_gpu.py > "$OUT/tests_s25.log" 2>&1
echo "s25 tests rc=$?"; grep -E "passed|failed|FAILED|Error|assert" "$OUT/tests_s25.log" | tail -n 8 | cut -c1-300
timeout 90 $T -m gpu tests/numerics/gpu/test_linear_gpu.py -k one_launch > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; grep -E "passed|failed|FAILED|Error|assert" "$OUT/tests.log" | tail -n 8 | cut -c1-300
timeout 420 python3 -c "from precision_engine.cli.app import main; main()" bench ceiling --decode \
  --tokens "${TOKENS:-1,16,32,48,64}" \
  --out "$OUT/decode_ceiling.json" > "$OUT/decode_ceiling.txt" 2>&1
echo "bench rc=$?"; tail -n 80 "$OUT/decode_ceiling.txt" | cut -c1-220
