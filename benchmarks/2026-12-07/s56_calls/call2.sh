#!/usr/bin/env bash
# Fifty-sixth session, call 2 (carry .whl). This session changed the FP8 linear's Q(W) cache key (a number on the
# weight and a torch.optim step count, no weak reference), its backward (autocast off) and the quantizers (input
# detached): the linear's, graphs', torch.compile's and the rollout engine's GPU tests run on any card, then the
# quantizers'. On an H200 first: `ring_context.py` and `bench quant` on AUTO's re-quantizer rows beside both
# programs, behind a copy and behind the FP8 dgrad. END_S: 360 s on an H200, 210 s elsewhere.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
source scripts/device_env.sh
source benchmarks/2026-12-06/s49_calls/steps.sh
END_S=210
case "$card" in
  *H200*)
    END_S=360
    timeout 60 python3 benchmarks/2026-12-07/s53_calls/ring_context.py 30 > "$OUT/ring_context.txt" 2>&1
    echo "ring_context rc=$?"; cut -c1-160 "$OUT/ring_context.txt" | grep -v Warning
    timeout 90 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep \
      --only "requant fp8 ->,requant fp8 triton,requant blocks triton,gluon w8 t8,blocks gluon t8" \
      --out "$OUT/quant_requant.json" > "$OUT/quant_requant.txt" 2>&1
    echo "bench quant rc=$?"; grep -E "requant|copy" "$OUT/quant_requant.txt" | grep -v pow2 | cut -c1-150 ;;
esac
seconds_left $((END_S - 120)) && gpu_tests linear $left tests/numerics/gpu/test_linear_gpu.py \
  tests/numerics/gpu/test_graph_capture_gpu.py tests/numerics/gpu/test_compile_gpu.py
seconds_left $((END_S - 50)) && gpu_tests engine $left tests/rl/gpu/test_engine_gpu.py
seconds_left $END_S && gpu_tests quant $left tests/numerics/gpu/test_quant_gpu.py
