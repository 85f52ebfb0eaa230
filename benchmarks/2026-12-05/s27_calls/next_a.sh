#!/usr/bin/env bash
# Prepared in the twenty-seventh session (no device time left), for the next one: a call on main as it
# lands, carry [".whl", ".dg"]. What the twenty-sixth session's tree changed without a GPU run:
#   - the chain decode's 64-token program (10 slots, 2 wgmmas in flight) named in its bits test, and the TMA
#     warp taking W_LIVE (PTX identical outside debug info on all of chain_config's 32 launches, Triton 3.6);
#   - torch.compile around the TMA-fed grad-output quantizer, through its custom op (test_compile_gpu.py);
#   - the 8B block with that quantizer in AUTO (last timed in the twenty-first session: 1.45 / 1.47x).
# Timeouts add up to 560 s; about 7-8 minutes expected with a cold Triton cache.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
gpu_tests tests_chain 240 tests/numerics/gpu/test_gemm_gpu.py -k chain_decode
gpu_tests tests_compile 100 tests/numerics/gpu/test_compile_gpu.py
source scripts/device_deep_gemm.sh
timeout 220 python3 -c "from precision_engine.cli.app import main; main()" bench block --reps 10 \
  --policy bf16_baseline --policy jetrl_unified --mode batch-invariant --out "$OUT/bench_block.json" \
  > "$OUT/bench_block.txt" 2>&1
echo "bench block rc=$?"; grep -v "^\[W\|Warning\|warn(" "$OUT/bench_block.txt" | tail -n 16 | cut -c1-200
