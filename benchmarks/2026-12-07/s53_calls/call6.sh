#!/usr/bin/env bash
# Fifty-third session, call 6 (carry .whl): `bench quant` timing each kernel behind a copy of its bytes, on the rows
# call 0 timed one after another (about 2 minutes); on an H200 first the re-quantizer's GPU bits tests (AUTO takes
# the ring there) and the linear's, graphs' and torch.compile's GPU tests (about 4 more). END_S: 480 s.
set -u
cd "$(dirname "$0")/../../.."
END_S=${END_S:-480}
source scripts/device_card.sh
source scripts/device_env.sh
source benchmarks/2026-12-06/s49_calls/steps.sh
case "$card" in
  *H200*)
    gpu_tests requant 170 tests/numerics/gpu/test_quant_gpu.py -k "gluon_requantizer or blocks_requantizer"
    gpu_tests linear 120 tests/numerics/gpu/test_linear_gpu.py tests/numerics/gpu/test_graph_capture_gpu.py \
      tests/numerics/gpu/test_compile_gpu.py ;;
esac
seconds_left $END_S || exit 0
timeout $left python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep \
  --only "requant fp8 ->,requant fp8 triton,requant blocks triton,gluon w8 t8,blocks gluon t8" \
  --out "$OUT/quant_requant.json" > "$OUT/quant_requant.txt" 2>&1
echo "bench quant rc=$?"; grep -E "requant|copy" "$OUT/quant_requant.txt" | grep -v pow2 | cut -c1-150
