#!/usr/bin/env bash
# One device call: GPU tests, a profile of one linear step, the Triton tile sweep, the benchmarks and the
# Llama-3.1-8B identity check. Full logs and JSON under $OUT; the short tables are printed last.
# Usage on the GPU machine:
#   scripts/gpu_check.sh [tests|alltests] [profile] [sweep] [quant] [kernels] [linear] [check] [quick]
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
steps=${*:-tests profile kernels linear}
quick=""; [[ " $steps " == *" quick "* ]] && quick="--quick"
precision() { python3 -c 'from precision_engine.cli.app import app; app()' "$@"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)' >> "$OUT/env.txt"
for s in $steps; do
  start=$SECONDS
  case $s in
    tests) python3 -m pytest -q -m gpu tests/numerics/gpu/test_gemm_gpu.py tests/numerics/gpu/test_linear_gpu.py > "$OUT/tests.txt" 2>&1 ;;
    alltests) python3 -m pytest -q -m gpu tests > "$OUT/tests.txt" 2>&1 ;;
    quant) precision bench quant --sweep --out "$OUT/bench_quant.json" > "$OUT/quant.txt" 2>&1 ;;
    check) for p in jetrl_unified fp8_rollout_naive jetrl_unified_kv; do
             precision check -p $p -m llama-3.1-8b --device cuda --batch 4 --seq-len 256 --top 5 \
               --save "$OUT/check_8b_$p.json" > "$OUT/check_$p.txt" 2>&1; echo "check $p: exit $?"
           done ;;
    profile) python3 scripts/profile_linear.py > "$OUT/profile.txt" 2>&1 ;;
    sweep) python3 scripts/gemm_tiles.py "$OUT/tiles.json" > "$OUT/tiles.txt" 2>&1 ;;
    kernels) precision bench kernels $quick --out "$OUT/bench_kernels.json" > "$OUT/kernels.txt" 2>&1 ;;
    linear) precision bench linear $quick --out "$OUT/bench_linear.json" > "$OUT/linear.txt" 2>&1 ;;
  esac
  echo "step $s: rc=$? $((SECONDS - start)) s"
done
cat "$OUT/env.txt"
tail -n 12 "$OUT/tests.txt" 2>/dev/null
for p in jetrl_unified fp8_rollout_naive jetrl_unified_kv; do [ -f "$OUT/check_$p.txt" ] && head -n 8 "$OUT/check_$p.txt"; done
tail -n 20 "$OUT/quant.txt" 2>/dev/null
for f in kernels linear; do [ -f "$OUT/$f.txt" ] && tail -n 45 "$OUT/$f.txt"; done
