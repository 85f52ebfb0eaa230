#!/usr/bin/env bash
# Twenty-sixth session, call D: the whole linear's decode at M = 8, 24, 40, 56 (with the pieces and the fitted
# narrow rule), then `bench linear` at 8192 tokens, BF16 against fp8_bi, DeepGEMM built, with the TMA-fed
# grad-output quantizer in AUTO (the Gluon re-quantizer left out: slower than the Triton one in call B).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 100 python3 -c "from precision_engine.cli.app import main; main()" bench ceiling --decode \
  --tokens 8,24,40,56 --out "$OUT/decode_ceiling2.json" > "$OUT/decode_ceiling2.txt" 2>&1
echo "decode rc=$?"; grep -E "^ +[0-9]+x|^target" "$OUT/decode_ceiling2.txt" | tail -n 26 | cut -c1-120
source scripts/device_deep_gemm.sh
timeout 380 python3 -c "from precision_engine.cli.app import main; main()" bench linear \
  --tokens 8192 --variants bf16,fp8_bi --out "$OUT/bench_linear.json" > "$OUT/bench_linear.txt" 2>&1
echo "bench linear rc=$?"; grep -v "^\[W\|Warning\|warn(" "$OUT/bench_linear.txt" | tail -n 40 | cut -c1-220
