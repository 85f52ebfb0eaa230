#!/usr/bin/env bash
# Fifty-third session, call 5 (carry .whl). On an H200 (about 5 minutes): the ring and the tiles behind a copy, a GEMM
# or themselves (`ring_grid.py`), the re-quantizer's GPU bits tests (AUTO takes the ring there), the linear's, graphs' and
# torch.compile's GPU tests, then `bench quant`'s rows one after another if time is left (END_S, 420 s by
# default). On any other card (about a minute): `ring_grid.py` alone.
set -u
cd "$(dirname "$0")/../../.."
END_S=${END_S:-420}
source scripts/device_card.sh
source scripts/device_env.sh
source benchmarks/2026-12-06/s49_calls/steps.sh
case "$card" in
  *H200*)
    timeout 120 python3 benchmarks/2026-12-07/s53_calls/ring_grid.py 30 > "$OUT/ring_grid.txt" 2>&1
    echo "ring_grid rc=$?"; cut -c1-160 "$OUT/ring_grid.txt" | grep -v Warning
    gpu_tests requant 170 tests/numerics/gpu/test_quant_gpu.py -k "gluon_requantizer or blocks_requantizer"
    seconds_left $((END_S - 60)) && gpu_tests linear $left tests/numerics/gpu/test_linear_gpu.py \
      tests/numerics/gpu/test_graph_capture_gpu.py tests/numerics/gpu/test_compile_gpu.py
    seconds_left $END_S || exit 0
    timeout $left python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep \
      --only "requant fp8 ->,gluon w8 t8,blocks gluon t8" --out "$OUT/quant_requant.json" \
      > "$OUT/quant_requant.txt" 2>&1
    echo "bench quant rc=$?"; grep -E "requant" "$OUT/quant_requant.txt" | grep -v pow2 | cut -c1-150 ;;
  *)
    timeout 200 python3 benchmarks/2026-12-07/s53_calls/ring_grid.py 30 > "$OUT/ring_grid.txt" 2>&1
    echo "ring_grid rc=$?"; cut -c1-160 "$OUT/ring_grid.txt" | grep -v Warning ;;
esac
