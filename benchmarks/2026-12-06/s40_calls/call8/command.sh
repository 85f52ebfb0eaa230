# Call 8 (H200, warm after call 7), run from the repository root as one device command:
source scripts/device_env.sh >/dev/null; source scripts/device_deep_gemm.sh >/dev/null
timeout 220 python3 -c "from precision_engine.cli.app import main; main()" bench linear \
  --tokens 1,8,16,24,32,40,48,56,64 --variants bf16,fp8_bi --out "$OUT/decode.json" > "$OUT/decode.txt" 2>&1
echo rc=$?; grep -E "target met" "$OUT/decode.txt" | cut -c1-900
