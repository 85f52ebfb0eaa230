#!/usr/bin/env bash
# Fifty-first session, call 1 (carry .whl; about 8 minutes with the start), either card: the re-quantizer's ring
# program now in the package (`gluon_requant._ring_kernel`, AUTO's on the H200 only):
#   1. its GPU bits tests: every program shape, one tile a program and the ring, both layouts, ragged shapes, AUTO;
#   2. `precision bench quant --sweep` on AUTO's rows beside copies of the same bytes, and the 8-warp programs
#      with and without the ring in both layouts, in the same run;
#   3. the GPU tests of everything AUTO's re-quantizer feeds (the linear's backward, graphs, torch.compile).
set -u
cd "$(dirname "$0")/../../.."
END_S=${END_S:-540}
source scripts/device_card.sh
source scripts/device_env.sh
source benchmarks/2026-12-06/s49_calls/steps.sh
gpu_tests requant 180 tests/numerics/gpu/test_quant_gpu.py -k "gluon_requantizer or blocks_requantizer"
seconds_left $((END_S - 60)) || exit 0
timeout $left python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep \
  --only "requant fp8 ->,requant fp8 triton,requant blocks triton,gluon w8 t8,blocks gluon t8" \
  --out "$OUT/quant_requant.json" > "$OUT/quant_requant.txt" 2>&1
echo "bench quant rc=$?"; grep -E "requant|copy|of copy" "$OUT/quant_requant.txt" | grep -v pow2 | cut -c1-150
seconds_left $END_S && gpu_tests linear $left tests/numerics/gpu/test_linear_gpu.py \
  tests/numerics/gpu/test_graph_capture_gpu.py tests/numerics/gpu/test_compile_gpu.py
