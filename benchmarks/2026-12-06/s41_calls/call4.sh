#!/usr/bin/env bash
# Forty-first session, call 4 (carry .whl and .dg): bench ceiling again with its fix, then the second half of `s40_calls/next/call_check.sh`: the
# invariant and sampling benches (moved onto timed_turns without a device run), then torchao's
# Float8BlockwiseLinear beside fp8_bi_wblocks in turns at 8192 tokens (TORCHAO_S bounds its autotuning).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
precision=(python3 -c "from precision_engine.cli.app import main; main()")
gpu_tests ceiling 120 tests/bench/test_bench_ceiling.py  # call 3 found its crash; fixed since
timeout 120 "${precision[@]}" bench ceiling --quick --out "$OUT/ceiling.json" > "$OUT/ceiling.txt" 2>&1
echo "bench ceiling rc=$?"; tail -n 4 "$OUT/ceiling.txt" | cut -c1-200
timeout 100 python3 -m precision_engine.bench.invariant --quick > "$OUT/invariant.txt" 2>&1
echo "invariant rc=$?"; tail -n 4 "$OUT/invariant.txt" | cut -c1-200
timeout 100 python3 -m precision_engine.bench.sampling > "$OUT/sampling.txt" 2>&1
echo "sampling rc=$?"; tail -n 4 "$OUT/sampling.txt" | cut -c1-200
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout ${TORCHAO_S:-300} "${precision[@]}" bench linear --tokens 8192 \
  --variants bf16,fp8_bi_wblocks,torchao,torchao_triton --out "$OUT/torchao.json" > "$OUT/torchao.txt" 2>&1
echo "torchao rc=$?"; grep -E "ahead|target met" "$OUT/torchao.txt" | cut -c1-400
