#!/usr/bin/env bash
# Prepared in the thirty-sixth session for the next device call (carry .whl; about 3 minutes, no DeepGEMM): the
# batch-invariant attention's forward, 1.9x cuDNN's on the H100 (s36_calls/README.md), under other launches
# (probe_attention_tiles.py) on main and with attention_whole_blocks.patch (the blocks every row sees whole walked
# without masks: the same bits by construction, CPU-interpreter tests pass with it), then the GPU attention tests on
# the patched tree. A launch or the patch lands only if it is faster and every bits column says True.
set -u
cd "$(dirname "$0")/../../../.."
source benchmarks/2026-12-06/s36_calls/next/setup.sh
timeout 120 python3 $here/probe_attention_tiles.py > "$OUT/tiles_main.txt" 2>&1; echo "main rc=$?"
tail -n 13 "$OUT/tiles_main.txt"
apply_patch $here/attention_whole_blocks.patch && echo "patch applied"
timeout 120 python3 $here/probe_attention_tiles.py > "$OUT/tiles_whole.txt" 2>&1; echo "whole blocks rc=$?"
tail -n 13 "$OUT/tiles_whole.txt"
gpu_tests tests_whole ${TESTS_S:-240} ${TESTS:-tests/numerics/gpu/test_triton_invariant_gpu.py tests/numerics/gpu/test_attention_quant_gpu.py tests/numerics/gpu/test_triton_attention_fast_gpu.py tests/numerics/gpu/test_triton_attention_fp8kv_gpu.py tests/rl/gpu/test_engine_gpu.py}
restore && echo "patch reverted"
