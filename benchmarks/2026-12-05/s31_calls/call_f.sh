#!/usr/bin/env bash
# Thirty-first session, call F (carry .whl; about 4 minutes; worth running only if call EA's Gluon re-quantizer
# passes its bits but stops short of 80% of copy): Nsight Compute on the training step's quantizers with
# ../s30_calls/gluon_requant.patch applied: the Gluon re-quantizer beside the Triton one, the grad output, the
# 1x128 rows and the weight blocks (scripts/ncu_quantizers.py). What binds each: issue slots, stalls, DRAM.
set -u
cd "$(dirname "$0")/../../.."
git apply benchmarks/2026-12-05/s30_calls/gluon_requant.patch || { echo "gluon_requant.patch does not apply"; exit 4; }
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 240 $NCU --clock-control none -k regex:"_grad_output|_tokens_t|_requant|_rows|_blocks" --launch-skip 5 \
  --launch-count 5 --section SpeedOfLight --section WarpStateStats --section InstructionStats \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
  python3 scripts/ncu_quantizers.py > "$OUT/ncu_quantizers.txt" 2>&1
echo "ncu rc=$?"
grep -E "^  _|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc A|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Executed Instructions  |Stall" "$OUT/ncu_quantizers.txt" | cut -c1-160 | head -90
