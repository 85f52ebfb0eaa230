#!/usr/bin/env bash
# Fifty-third session, call 7 (carry .whl), an H200 only (exit 3 at once on any other card; about 6 minutes):
# each layout's ring and tiles behind a copy, their dgrad GEMM or themselves (`ring_context.py`), `bench quant`
# (each kernel behind a copy of its bytes) on call 6's rows, the re-quantizer's GPU bits tests (AUTO takes the ring
# there), then the linear's, graphs' and torch.compile's GPU tests. END_S: 450 s.
set -u
cd "$(dirname "$0")/../../.."
END_S=${END_S:-450}
source scripts/device_card.sh
case "$card" in *H200*) ;; *) exit 3 ;; esac
source scripts/device_env.sh
source benchmarks/2026-12-06/s49_calls/steps.sh
timeout 120 python3 benchmarks/2026-12-07/s53_calls/ring_context.py 30 > "$OUT/ring_context.txt" 2>&1
echo "ring_context rc=$?"; cut -c1-160 "$OUT/ring_context.txt" | grep -v Warning
timeout 150 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep \
  --only "requant fp8 ->,requant fp8 triton,requant blocks triton,gluon w8 t8,blocks gluon t8" \
  --out "$OUT/quant_requant.json" > "$OUT/quant_requant.txt" 2>&1
echo "bench quant rc=$?"; grep -E "requant|copy" "$OUT/quant_requant.txt" | grep -v pow2 | cut -c1-150
seconds_left $((END_S - 90)) && gpu_tests requant $left tests/numerics/gpu/test_quant_gpu.py \
  -k "gluon_requantizer or blocks_requantizer"
seconds_left $END_S && gpu_tests linear $left tests/numerics/gpu/test_linear_gpu.py \
  tests/numerics/gpu/test_graph_capture_gpu.py tests/numerics/gpu/test_compile_gpu.py
