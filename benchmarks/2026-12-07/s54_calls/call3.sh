#!/usr/bin/env bash
# Fifty-fourth session, call 3 (carry .whl), after AUTO took the ring in both layouts on every Hopper card: on an
# H200 the fifty-third session's call 7 (about 6 minutes); on any other card the re-quantizer's GPU bits tests,
# the linear's, graphs' and torch.compile's GPU tests (AUTO now runs the ring on the H100 too), then `bench quant`
# on AUTO's re-quantizer rows beside both programs, behind a copy and behind the dgrad. END_S: 450 s.
set -u
cd "$(dirname "$0")/../../.."
END_S=${END_S:-450}
source scripts/device_card.sh
case "$card" in *H200*) exec bash benchmarks/2026-12-07/s53_calls/call7.sh ;; esac
source scripts/device_env.sh
source benchmarks/2026-12-06/s49_calls/steps.sh
gpu_tests requant 170 tests/numerics/gpu/test_quant_gpu.py -k "gluon_requantizer or blocks_requantizer"
gpu_tests linear 150 tests/numerics/gpu/test_linear_gpu.py tests/numerics/gpu/test_graph_capture_gpu.py \
  tests/numerics/gpu/test_compile_gpu.py
seconds_left $END_S || exit 0
timeout $left python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep \
  --only "requant fp8 ->,gluon w8 t8,blocks gluon t8" --out "$OUT/quant_requant.json" > "$OUT/quant_requant.txt" 2>&1
echo "bench quant rc=$?"; grep -E "requant|copy|GB/s" "$OUT/quant_requant.txt" | grep -v pow2 | cut -c1-150
