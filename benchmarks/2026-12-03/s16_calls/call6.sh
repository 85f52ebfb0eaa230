#!/usr/bin/env bash
# Call 6 (sixteenth session): `chain_config` retuned from call 5: the chain GPU tests (every launch choice and
# AUTO's dispatch, rows bitwise across M), the Gluon compile tests, and the linear at decode sizes on every 8B
# shape (graph replays).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
CLI="from precision_engine.cli.app import main; main()"
python3 -m pytest -q -p no:cacheprovider tests/numerics/test_gluon_compile.py 2>&1 | tail -n 2
timeout 200 python3 -m pytest -q -rf -p no:cacheprovider tests/numerics/gpu/test_gemm_gpu.py \
  -k "chain or rows_bitwise or one_segment" > "$OUT/test_numerics.log" 2>&1
grep -E "passed|failed|FAILED|Error" "$OUT/test_numerics.log" | tail -n 8 | cut -c1-400
timeout 200 python3 -c "$CLI" bench linear --tokens 1,16,32,64 --variants bf16,fp8_bi \
  --out "$OUT/bench_linear.json" 2>&1 | grep -v "^\[W\|Warning\|warn(\|return Variable" > "$OUT/linear.txt"
echo "bench rc=$?"; cut -c1-110 "$OUT/linear.txt" | grep -v "^ *$" | tail -n 34
