#!/usr/bin/env bash
# Prepared by the forty-third session for the next (carry .whl; any Hopper card, about 5 minutes): the unrun GPU
# test of `Decoder.kv_scales` on the model's device, the default `bench block` (jetrl_unified_kv's graphed row
# should time now), then Nsight Compute's warp-state and scheduler sections on one chain launch at M = 24 on
# 4096x4096 beside cuBLAS's BF16 kernel (the ninth and tenth matching launches: M = 24, second round): where the
# chain kernel's fixed time goes (next/README.md, item 3).
set -u
cd "$(dirname "$0")/../../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
gpu_tests kv 120 tests/models/gpu/test_decoder_kv_gpu.py
timeout 150 python3 benchmarks/2026-12-06/s43_calls/block_memory.py > "$OUT/block_memory.txt" 2>&1
echo "block rc=$?"; grep -E "^(policy|jetrl_unified_kv|peak)" "$OUT/block_memory.txt" | cut -c1-160
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
timeout 200 $NCU --clock-control none --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
  --section LaunchStats -k "regex:chain|nvjet" --launch-skip 8 --launch-count 2 \
  python3 benchmarks/2026-12-06/s43_calls/ncu_decode.py 4096x4096 > "$OUT/ncu_sections.txt" 2>&1
echo "ncu rc=$?"; grep -E "^  [a-z_]|Duration|Stall|Warp Cycles|Issued|No Eligible|Active Warps" \
  "$OUT/ncu_sections.txt" | head -60
