#!/usr/bin/env bash
# Fifty-fourth session, call 4 (carry .whl), an H200 only (exit 3 at once on any other card): the fifty-third
# session's call 7 in the time left (on an H100 its steps took 17 + 28 + 97 + 60 s): `ring_context.py`, `bench
# quant` on AUTO's re-quantizer rows beside both programs (behind a copy and behind the dgrad), the re-quantizer's
# GPU bits tests (AUTO now on the ring in both layouts), the linear's, graphs' and torch.compile's. END_S: 330 s.
set -u
cd "$(dirname "$0")/../../.."
END_S=${END_S:-330}
source scripts/device_card.sh
case "$card" in *H200*) ;; *) exit 3 ;; esac
source scripts/device_env.sh
source benchmarks/2026-12-06/s49_calls/steps.sh
timeout 60 python3 benchmarks/2026-12-07/s53_calls/ring_context.py 30 > "$OUT/ring_context.txt" 2>&1
echo "ring_context rc=$?"; cut -c1-160 "$OUT/ring_context.txt" | grep -v Warning
timeout 80 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep \
  --only "requant fp8 ->,requant fp8 triton,requant blocks triton,gluon w8 t8,blocks gluon t8" \
  --out "$OUT/quant_requant.json" > "$OUT/quant_requant.txt" 2>&1
echo "bench quant rc=$?"; grep -E "requant|copy" "$OUT/quant_requant.txt" | grep -v pow2 | cut -c1-150
seconds_left $((END_S - 75)) && gpu_tests requant $left tests/numerics/gpu/test_quant_gpu.py \
  -k "gluon_requantizer or blocks_requantizer"
seconds_left $END_S && gpu_tests linear $left tests/numerics/gpu/test_linear_gpu.py \
  tests/numerics/gpu/test_graph_capture_gpu.py tests/numerics/gpu/test_compile_gpu.py
