#!/usr/bin/env bash
# Twenty-ninth session, call B (carry .whl), with WIDE_CHAIN_MAX_M = 32 landed: the wide weights' rule against the
# rule before and the chain launch at every M (wide_chain.py), the whole linear's decode table, then the chain
# decode's bits test on the two wide weights (new to it).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 220 python3 benchmarks/2026-12-05/s29_calls/wide_chain.py "$OUT/wide_chain.json" 2>&1 \
  | grep -v "Warning\|warn(" | tee "$OUT/wide_chain.txt" | cut -c1-250
timeout 100 python3 -c "from precision_engine.cli.app import main; main()" bench ceiling --decode \
  --tokens 1,8,16,24,32,40,48,56,64 --out "$OUT/decode.json" 2>&1 | grep -v "Warning\|warn(" > "$OUT/decode.txt"
grep "^target" "$OUT/decode.txt" | cut -c1-900
gpu_tests chain_bits 230 tests/numerics/gpu/test_gemm_gpu.py -k "chain_decode and (14336 or 28672)"
