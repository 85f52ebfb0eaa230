#!/usr/bin/env bash
# Prepared for the next device session (carry .whl and .dg; about 9 minutes with the start), on an H200 first:
#   1. on main, timed only (the bits of both probes were checked on an H100, the same SASS, and step 2's tests
#      check every order's bytes here): the re-quantizer's programs in other orders (`requant_order.py bench`),
#      then the cp.async ring (`requant_ring.py bench`);
#   2. order.patch applied (`gluon_requant.program_group`: column strips fastest up to 4096 columns): the
#      re-quantizer's GPU tests (every order's bytes in both layouts, AUTO's dispatch), then `precision bench quant
#      --sweep` on AUTO's re-quantizer rows ("requant fp8 -> tokens^T" and "-> blocks^T", each beside a copy of
#      the same bytes) and every order of the Gluon programs in both layouts ("gluon order N");
#   3. Nsight Compute on the kernel in both orders beside a copy while time is left (`ncu_requant`).
# On an H100 steps 2 and 3 only (the orders ran there in the fiftieth session's call 1).
set -u
cd "$(dirname "$0")/../../../.."
END_S=${END_S:-570}
source scripts/device_card.sh
source scripts/device_env.sh
source benchmarks/2026-12-06/s49_calls/steps.sh
source benchmarks/2026-12-07/s50_calls/steps.sh
case "$card" in
  *H200*)
    probe_step order_bench 100 benchmarks/2026-12-07/s50_calls/requant_order.py bench 30
    probe_step ring_bench 100 benchmarks/2026-12-06/s49_calls/requant_ring.py bench 30 ;;
esac
here=benchmarks/2026-12-07/s50_calls/next
git apply $here/order.patch 2>/dev/null || patch -p1 < $here/order.patch || exit 4
gpu_tests order_patch 150 tests/numerics/gpu/test_quant_gpu.py -k "gluon_requantizer or blocks_requantizer"
seconds_left $((END_S - 60)) || exit 0
timeout $left python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep \
  --only "requant fp8 ->,gluon order" --out "$OUT/quant_requant.json" > "$OUT/quant_requant.txt" 2>&1
echo "bench quant rc=$?"; grep -E "requant|copy|of copy" "$OUT/quant_requant.txt" | cut -c1-160
seconds_left $END_S && ncu_requant $left
