#!/usr/bin/env bash
# Fifty-sixth session, call 2 (carry .whl). On an H200: `ring_context.py`, then `bench quant` on AUTO's re-quantizer
# rows beside both programs (behind a copy and behind the FP8 dgrad), then the quantizers' GPU tests (this session
# detaches the quantizers' input). The linear's, graphs' and torch.compile's GPU tests passed at 78b2af6 on an H100
# (call 0), so they are left out. On any other card: the quantizers' GPU tests only, 150 s. END_S: 230 s.
set -u
cd "$(dirname "$0")/../../.."
END_S=${END_S:-230}
source scripts/device_card.sh
source scripts/device_env.sh
source benchmarks/2026-12-06/s49_calls/steps.sh
case "$card" in
  *H200*)
    timeout 60 python3 benchmarks/2026-12-07/s53_calls/ring_context.py 30 > "$OUT/ring_context.txt" 2>&1
    echo "ring_context rc=$?"; cut -c1-160 "$OUT/ring_context.txt" | grep -v Warning
    timeout 90 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep \
      --only "requant fp8 ->,requant fp8 triton,requant blocks triton,gluon w8 t8,blocks gluon t8" \
      --out "$OUT/quant_requant.json" > "$OUT/quant_requant.txt" 2>&1
    echo "bench quant rc=$?"; grep -E "requant|copy" "$OUT/quant_requant.txt" | grep -v pow2 | cut -c1-150 ;;
  *) END_S=150 ;;
esac
seconds_left $END_S && gpu_tests quant $left tests/numerics/gpu/test_quant_gpu.py
