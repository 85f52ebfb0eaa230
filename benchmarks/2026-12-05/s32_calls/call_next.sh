#!/usr/bin/env bash
# Prepared in the thirty-second session for the next one, best on an H200 (issue 12's card; carry [".whl", ".dg"];
# timeouts add up to 560 s, about 7 minutes expected). Main as it landed with the Gluon re-quantizer in AUTO,
# measured so far on an H100 only:
#   1. every quantizer's GPU bits test (the Gluon re-quantizer's and AUTO's dispatch among them);
#   2. `bench quant --sweep` on the re-quantizer's rows: AUTO, the Triton kernel, every Gluon program shape with
#      fp32 and with power-of-two scales (AUTO keeps pow2 on Triton: on the H100 the 8-warp Gluon program lost
#      there) and the Triton kernel's pow2 configs; the target line says where >= 80% of copy stands;
#   3. the 8B block fwd+bwd, BF16 against jetrl_unified (last timed before the re-quantizer and the one-correction
#      quotient changed: 1.48 / 1.49x on the H200).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
gpu_tests bits 200 tests/numerics/gpu/test_quant_gpu.py
timeout 140 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep --reps 30 \
  --only "requant fp8 -,requant fp8 triton kernel,requant gluon,requant pow2" --out "$OUT/requant.json" \
  > "$OUT/requant.txt" 2>&1
echo "requant rc=$?"; grep -E "^requant (fp8|pow2 (->|triton|gluon w8)|gluon w8)|>= 80%" "$OUT/requant.txt" | cut -c1-160
source scripts/device_deep_gemm.sh
timeout 220 python3 -c "from precision_engine.cli.app import main; main()" bench block --reps 10 \
  --policy bf16_baseline --policy jetrl_unified --mode batch-invariant --out "$OUT/bench_block.json" \
  > "$OUT/bench_block.txt" 2>&1
echo "bench block rc=$?"; grep -v "^\[W\|Warning\|warn(" "$OUT/bench_block.txt" | tail -n 16 | cut -c1-200
