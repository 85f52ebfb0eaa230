# Sourced from the repository root by this session's calls, after scripts/device_card.sh, scripts/device_env.sh
# and the forty-ninth session's steps (`probe_step`). `order_steps`: the re-quantizer's programs walked in other
# orders (`requant_order.py`), bits first, then in turns with the shipped kernel and a copy, 90 s each.
# `ncu_requant SECONDS`: Nsight Compute's full set on the re-quantizer and a copy kernel of the same bytes
# (`ncu_requant.py`); the report and its details page land in $OUT, and the duration, DRAM and L2 lines of each
# kernel's last launch a shape are printed.
ncu_requant() {
  local ncu dir=benchmarks/2026-12-07/s50_calls
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  echo "ncu: $ncu"
  timeout "$1" "$ncu" --set full --import-source no -k regex:'requant|elementwise' -f -o "$OUT/requant" \
    python3 $dir/ncu_requant.py > "$OUT/ncu_run.txt" 2>&1
  echo "ncu rc=$?"; grep -E "launched|==ERROR|==WARNING" "$OUT/ncu_run.txt" | head -n 8
  "$ncu" --import "$OUT/requant.ncu-rep" --page details > "$OUT/ncu_details.txt" 2>&1
  "$ncu" --import "$OUT/requant.ncu-rep" --page raw --csv > "$OUT/ncu_raw.csv" 2>&1
  python3 $dir/ncu_summary.py "$OUT/ncu_raw.csv"
}
order_steps() {
  local probe=benchmarks/2026-12-07/s50_calls/requant_order.py
  probe_step order_check 90 $probe check
  probe_step order_bench 90 $probe bench 30
}
