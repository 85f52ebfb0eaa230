#!/usr/bin/env bash
# Fifty-fourth session, call 6 (carry .whl), an H200 only (exit 3 at once on any other card), for the 315 s of budget
# left: `bench quant` on AUTO's re-quantizer rows beside both programs, behind a copy and behind the FP8 dgrad
# (about 30 s on an H100), then the re-quantizer's GPU bits tests and the linear's, graphs' and torch.compile's in
# what is left. END_S: 190 s.
set -u
cd "$(dirname "$0")/../../.."
END_S=${END_S:-190}
source scripts/device_card.sh
case "$card" in *H200*) ;; *) exit 3 ;; esac
source scripts/device_env.sh
source benchmarks/2026-12-06/s49_calls/steps.sh
timeout 90 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep \
  --only "requant fp8 ->,requant fp8 triton,requant blocks triton,gluon w8 t8,blocks gluon t8" \
  --out "$OUT/quant_requant.json" > "$OUT/quant_requant.txt" 2>&1
echo "bench quant rc=$?"; grep -E "requant|copy" "$OUT/quant_requant.txt" | grep -v pow2 | cut -c1-150
seconds_left $((END_S - 60)) && gpu_tests requant $left tests/numerics/gpu/test_quant_gpu.py \
  -k "gluon_requantizer or blocks_requantizer"
seconds_left $END_S && gpu_tests linear $left tests/numerics/gpu/test_linear_gpu.py \
  tests/numerics/gpu/test_graph_capture_gpu.py tests/numerics/gpu/test_compile_gpu.py
