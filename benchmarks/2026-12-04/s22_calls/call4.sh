#!/usr/bin/env bash
# Call 4 (twenty-second session): the chain decode with its scales staged in shared memory: its bits (GPU test,
# every launch choice), then scale_tune.py against the kernel before it, and Nsight Compute's metrics again.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
T="python3 -m pytest -q -rf -m gpu -p no:cacheprovider -x"
timeout 150 $T tests/numerics/gpu/test_gemm_gpu.py -k chain_decode > "$OUT/tests_chain.log" 2>&1
echo "chain tests rc=$?"; grep -E "passed|failed|FAILED|Error|assert" "$OUT/tests_chain.log" | tail -n 8 | cut -c1-400
timeout 240 python3 benchmarks/2026-12-04/s22_calls/scale_tune.py "$OUT/tune.json" > "$OUT/tune.log" 2>&1
echo "tune rc=$?"; grep -v "^\s*$" "$OUT/tune.log" | grep -v Warning | tail -n 30 | cut -c1-400
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
S=smsp__average_warps_issue_stalled
METRICS=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
for r in barrier long_scoreboard wait sleeping no_instruction short_scoreboard mio_throttle lg_throttle selected; do
  METRICS=$METRICS,${S}_${r}_per_issue_active.ratio
done
timeout 120 $NCU --clock-control none -k regex:_gluon_chain --metrics $METRICS \
  python3 scripts/ncu_chain_decode.py > "$OUT/ncu_chain.txt" 2>&1
echo "ncu rc=$?"; python3 benchmarks/2026-12-04/s22_calls/parse_ncu.py "$OUT/ncu_chain.txt"
