#!/usr/bin/env bash
# Call 3 (twenty-first session): `bench ceiling --decode` with the stream as the faster of a Triton read and a
# copy (call 2's torch.sum read lost to the copy at small sizes), and Nsight Compute on the training step's four
# quantizers (scripts/ncu_quantizers.py): where their time goes (issue slots, stalls, instructions).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 120 python3 -c "from precision_engine.cli.app import main; main()" bench ceiling --decode \
  --out "$OUT/decode_ceiling.json" > "$OUT/decode_ceiling.txt" 2>&1
echo "decode ceiling rc=$?"; grep -E "^ +[0-9]+x" "$OUT/decode_ceiling.txt" | cut -c1-175
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 200 $NCU --clock-control none -k regex:"_grad_output|_tokens_t|_rows|_blocks" --launch-skip 4 \
  --launch-count 4 --section SpeedOfLight --section WarpStateStats --section InstructionStats \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
  python3 scripts/ncu_quantizers.py > "$OUT/ncu_quantizers.txt" 2>&1
echo "ncu rc=$?"
grep -E "^  _|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc A|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Executed Instructions  |Stall" "$OUT/ncu_quantizers.txt" | cut -c1-160 | head -80
