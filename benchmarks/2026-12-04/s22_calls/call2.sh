#!/usr/bin/env bash
# Call 2 (twenty-second session): Nsight Compute on the chain decode (scripts/ncu_chain_decode.py), 4096x4096 and
# 4096x14336 at M = 1, 16, 64: what its time waits on, since call 1's K splits (twice the programs) ran no faster.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
S=smsp__average_warps_issue_stalled
METRICS=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
for r in barrier long_scoreboard wait math_pipe_throttle membar sleeping no_instruction short_scoreboard mio_throttle lg_throttle dispatch_stall drain branch_resolving selected not_selected misc; do
  METRICS=$METRICS,${S}_${r}_per_issue_active.ratio
done
timeout 300 $NCU --clock-control none -k regex:_gluon_chain --metrics $METRICS \
  python3 scripts/ncu_chain_decode.py > "$OUT/ncu_chain.txt" 2>&1
echo "ncu rc=$?"
python3 benchmarks/2026-12-04/s22_calls/parse_ncu.py "$OUT/ncu_chain.txt"; grep -E "launched|rror" "$OUT/ncu_chain.txt" | head
