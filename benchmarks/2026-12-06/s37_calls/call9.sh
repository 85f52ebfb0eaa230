#!/usr/bin/env bash
# Thirty-seventh session's last call (carry .whl and .dg; about 3 minutes): where the 8B block's step spends GPU
# time in each mode (profile_block.py, with DeepGEMM), then the Gluon re-quantizer's program shapes on this card
# (`bench quant --sweep`, the re-quantizer's rows only: on the H200 the shipped shape reached 75-80% of a copy of
# its own bytes, on the H100 91-93%). NO_DG=1 skips DeepGEMM, NO_QUANT=1 the sweep, PROFILE_S bounds the profile.
set -u
cd "$(dirname "$0")/../../.."
here=benchmarks/2026-12-06/s37_calls
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
[ -z "${NO_DG:-}" ] && source scripts/device_deep_gemm.sh
timeout ${PROFILE_S:-150} python3 $here/profile_block.py > "$OUT/profile_block.txt" 2>&1; echo "profile rc=$?"
grep "^==" "$OUT/profile_block.txt"
[ -n "${NO_QUANT:-}" ] && exit 0
timeout 100 python3 -c "from precision_engine.cli.app import main; main()" bench quant --sweep --reps 30 \
  --only "requant fp8 -,requant fp8 triton,requant gluon" --out "$OUT/quant_sweep.json" > "$OUT/quant_sweep.txt" 2>&1
echo "quant rc=$?"; grep -E "requant|copy" "$OUT/quant_sweep.txt" | cut -c1-90
