#!/usr/bin/env bash
# Prepared in the twenty-seventh session (no device time left), for the next one: a call on main as it
# lands, carry [".whl", ".dg"]. What the twenty-sixth session's tree changed without a GPU run:
#   - the chain decode's 64-token program (10 slots, 2 wgmmas in flight) named in its bits test, and the TMA
#     warp taking W_LIVE (PTX identical outside debug info on all of chain_config's 32 launches, Triton 3.6);
#   - torch.compile around the TMA-fed grad-output quantizer, through its custom op (test_compile_gpu.py);
#   - the 8B block with that quantizer in AUTO (last timed in the twenty-first session: 1.45 / 1.47x).
# Timeouts add up to 560 s; about 7-8 minutes expected with a cold Triton cache. A timed-out test step prints no
# summary line: its log's last PASSED lines say how far it got.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
T="python3 -m pytest -q -rf -p no:cacheprovider"
timeout 240 $T -m gpu tests/numerics/gpu/test_gemm_gpu.py -k chain_decode -v > "$OUT/tests_chain.log" 2>&1
echo "chain decode tests rc=$?"; grep -E "PASSED|FAILED|passed|failed|Error|assert" "$OUT/tests_chain.log" | tail -n 8 | cut -c1-300
timeout 100 $T -m gpu tests/numerics/gpu/test_compile_gpu.py -v > "$OUT/tests_compile.log" 2>&1
echo "compile tests rc=$?"; grep -E "PASSED|FAILED|passed|failed|Error|assert" "$OUT/tests_compile.log" | tail -n 8 | cut -c1-300
source scripts/device_deep_gemm.sh
timeout 220 python3 -c "from precision_engine.cli.app import main; main()" bench block --reps 10 \
  --policy bf16_baseline --policy jetrl_unified --mode batch-invariant --out "$OUT/bench_block.json" \
  > "$OUT/bench_block.txt" 2>&1
echo "bench block rc=$?"; grep -v "^\[W\|Warning\|warn(" "$OUT/bench_block.txt" | tail -n 16 | cut -c1-200
