#!/usr/bin/env bash
# Fifty-sixth session, call 3 (carry .whl), for the 377 s of budget left. On an H200: `ring_context.py`, then
# `bench quant` on AUTO's re-quantizer rows beside both programs (behind a copy and behind the FP8 dgrad). Then,
# on any card, the linear's and torch.compile's GPU tests in what is left: since call 2 the output follows
# autocast's dtype, the bias gradient is a custom op under torch.compile, and forward's argument is `input`.
# END_S: 210 s on an H200, 100 s elsewhere.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
source scripts/device_env.sh
source benchmarks/2026-12-06/s49_calls/steps.sh
END_S=100
case "$card" in
  *H200*)
    END_S=210
    timeout 60 python3 benchmarks/2026-12-07/s53_calls/ring_context.py 30 > "$OUT/ring_context.txt" 2>&1
    echo "ring_context rc=$?"; cut -c1-160 "$OUT/ring_context.txt" | grep -v Warning
    timeout 90 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep \
      --only "requant fp8 ->,requant fp8 triton,requant blocks triton,gluon w8 t8,blocks gluon t8" \
      --out "$OUT/quant_requant.json" > "$OUT/quant_requant.txt" 2>&1
    echo "bench quant rc=$?"; grep -E "requant|copy" "$OUT/quant_requant.txt" | grep -v pow2 | cut -c1-150 ;;
esac
seconds_left $END_S && gpu_tests linear $left tests/numerics/gpu/test_compile_gpu.py tests/numerics/gpu/test_linear_gpu.py
