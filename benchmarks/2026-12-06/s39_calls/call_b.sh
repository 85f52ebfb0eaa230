#!/usr/bin/env bash
# Thirty-ninth session, call B (carry .whl and .dg; about 5 minutes): the attention's fwd+bwd, main against
# attention_backward_inputs.patch in one process (ab_attention.py); where fp8_bi_wblocks's eager step spends host
# time (profile_host.py); torchao beside fp8_bi_wblocks on 28672x4096, the rows call 3 ran out of time before.
set -u
cd "$(dirname "$0")/../../.."
here=benchmarks/2026-12-06/s39_calls
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
source scripts/device_deep_gemm.sh
timeout 120 python3 $here/ab_attention.py $here/ta_patched.py.txt > "$OUT/ab_attention.txt" 2>&1
echo "ab rc=$?"; tail -n 5 "$OUT/ab_attention.txt"
for shape in 4096x4096 1024x4096; do
  timeout 60 python3 $here/profile_host.py fp8_bi_wblocks $shape > "$OUT/profile_host_$shape.txt" 2>&1
  echo "profile $shape rc=$?"; grep "host ms" "$OUT/profile_host_$shape.txt"
done
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout 220 python3 -c "from precision_engine.cli.app import main; main()" \
  bench linear --tokens 8192,16384 --shapes 28672x4096 --variants bf16,fp8_bi_wblocks,torchao,torchao_triton \
  --out "$OUT/bench_linear_torchao_28672.json" > "$OUT/bench_linear_torchao_28672.txt" 2>&1
echo "torchao rc=$?"; grep -E "ahead|target met" "$OUT/bench_linear_torchao_28672.txt" | cut -c1-300
