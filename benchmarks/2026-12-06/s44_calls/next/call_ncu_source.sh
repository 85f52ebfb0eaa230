#!/usr/bin/env bash
# Prepared by the forty-fourth session (carry .whl; any Hopper card, about 3 minutes): where the chain decode
# kernel's warps stall, per SASS line. Nsight Compute's full set on one chain launch at M = 24 on 4096x4096 (the
# sixth chain launch of `s43_calls/ncu_decode.py`: M = 24, third round), then its source page as CSV (each
# SASS instruction with its warp-stall samples). The question (`next/README.md`): how long the MMA warpgroup
# waits before its first wgmma (`_stage_scales`: every K block's scales, a dependent global load, then a CTA
# barrier) and in the epilogue, against the K loop. The scheduler sections alone (forty-fourth session's check
# call) put the largest stall at a CTA barrier without saying which warps wait there.
set -u
cd "$(dirname "$0")/../../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
timeout ${NCU_S:-200} $NCU --clock-control none --set full --import-source yes -k "regex:chain" --launch-skip 5 \
  --launch-count 1 -o /tmp/chain python3 benchmarks/2026-12-06/s43_calls/ncu_decode.py 4096x4096 \
  > "$OUT/ncu_run.txt" 2>&1
echo "ncu rc=$?"
$NCU -i /tmp/chain.ncu-rep --page source --csv --print-source sass > "$OUT/source.csv" 2> "$OUT/source.err"
echo "source rc=$? lines=$(wc -l < "$OUT/source.csv")"
$NCU -i /tmp/chain.ncu-rep --page details --section WarpStateStats --section SourceCounters > "$OUT/details.txt" 2>&1
python3 benchmarks/2026-12-06/s44_calls/source_stalls.py "$OUT/source.csv"
