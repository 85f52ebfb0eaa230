#!/usr/bin/env bash
# Prepared in the thirty-sixth session (carry .whl and .dg; about 5 minutes with DeepGEMM, 4 with NO_DG=1): the 8B
# block in both modes on three trees, each a set of this folder's patches on the tree the call runs:
#   main     as it is;
#   whole    attention_whole_blocks.patch (the blocks every row sees whole walked without masks);
#   layout   whole plus attention_out_token_major.patch (the attention's output stored token-major, so o_proj's
#            input is a view and its gradient needs no copy before the logsumexp backward);
#   rows128  layout plus attention_prefill_128_rows.patch (a forward longer than one tile on 128-row, 8-warp
#            programs; run it only if call_attention.sh found 128/8/2 faster with every bits column True).
# TREES picks some (default "main whole layout"); BLOCK_S bounds each block run (s).
set -u
cd "$(dirname "$0")/../../../.."
source benchmarks/2026-12-06/s36_calls/next/setup.sh
[ -z "${NO_DG:-}" ] && source scripts/device_deep_gemm.sh
for tree in ${TREES:-main whole layout}; do
  restore
  [ $tree != main ] && apply_patch $here/attention_whole_blocks.patch
  case $tree in layout|rows128) apply_patch $here/attention_out_token_major.patch ;; esac
  [ $tree = rows128 ] && apply_patch $here/attention_prefill_128_rows.patch
  timeout ${BLOCK_S:-140} python3 -c "from precision_engine.cli.app import main; main()" bench block --reps 10 \
    --policy bf16_baseline --policy jetrl_unified --out "$OUT/block_$tree.json" > "$OUT/block_$tree.txt" 2>&1
  echo "$tree rc=$?"; grep -E "^(bf16_baseline|jetrl_unified) +(fast|batch)|^jetrl.*target" "$OUT/block_$tree.txt" | cut -c1-160
done
restore
