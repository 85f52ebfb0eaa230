#!/usr/bin/env bash
# Forty-first session, call 4 (carry .whl and .dg): the second half of `s40_calls/next/call_check.sh`: the
# invariant and sampling benches (moved onto timed_turns without a device run), then torchao's
# Float8BlockwiseLinear beside fp8_bi_wblocks in turns at 8192 tokens (TORCHAO_S bounds its autotuning).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
precision=(python3 -c "from precision_engine.cli.app import main; main()")
timeout 100 python3 -m precision_engine.bench.invariant --quick > "$OUT/invariant.txt" 2>&1
echo "invariant rc=$?"; tail -n 4 "$OUT/invariant.txt" | cut -c1-200
timeout 100 python3 -m precision_engine.bench.sampling > "$OUT/sampling.txt" 2>&1
echo "sampling rc=$?"; tail -n 4 "$OUT/sampling.txt" | cut -c1-200
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout ${TORCHAO_S:-300} "${precision[@]}" bench linear --tokens 8192 \
  --variants bf16,fp8_bi_wblocks,torchao,torchao_triton --out "$OUT/torchao.json" > "$OUT/torchao.txt" 2>&1
echo "torchao rc=$?"; grep -E "ahead|target met" "$OUT/torchao.txt" | cut -c1-400
