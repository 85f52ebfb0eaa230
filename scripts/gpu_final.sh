#!/usr/bin/env bash
# Bounded GPU steps (H200): the GPU tests that guard what changed (GEMM dispatch, fused linears and producers,
# quantizers, invariant kernels, on-policy bitwise), then the rollout, decoder-block and invariant-kernel
# benches, the FP8 ceilings, the FP8 linear bench --quick beside torchao and the quantizer sweep. Logs stay in
# /tmp/gpu_final; $OUT gets the JSON, the test logs and summary.txt (the device returns a few files only).
#
#   run(command='SKIP="bench_linear bench_quant bench_ceiling" bash scripts/gpu_final.sh', carry=[".whl"])
#
# Each step has its own time limit; the whole script outruns one 600 s device call, so a call runs part of
# it: SKIP="bench_linear bench_quant bench_ceiling" (tests and benches, ~7-8 min), SKIP="<all but bench_ceiling
# bench_quant>" (the ceilings with our linear beside them on every 8B shape, estimated 3-5 min: not yet run),
# then SKIP="<all but bench_linear>" (torchao's autotuning, up to LINEAR_LIMIT s).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}
LOG=/tmp/gpu_final  # the device returns a few files only: logs stay here, $OUT gets JSON + test logs + summary
mkdir -p "$OUT" "$LOG"
PY=python3
for wheel in .whl/*.whl; do
  case $(basename "$wheel") in
    torchao-*) $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/ao "$wheel" ;;
    *) module=$(basename "$wheel" | cut -d- -f1 | tr A-Z a-z); module=${module/google_re2/re2}; module=${module/rpds_py/rpds}
       $PY -c "import $module" 2>/dev/null || $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel" ;;
  esac
done > "$LOG/install.log" 2>&1
export PYTHONPATH=/tmp/site:$PWD
# The image lacks the core's jsonschema and google-re2: ../shared/tools/device-wheels, then
# ../shared/tools/device-wheels google-re2 (not in its default list) fetch them into .whl/.
$PY -c "import precision_engine.policy" || { echo "missing wheels: see $LOG/install.log and the note above"; exit 3; }
CLI="from precision_engine.cli.app import main; main()"
{ nvidia-smi -L; $PY -c "import torch, triton, transformers; print(torch.__version__, torch.version.cuda, triton.__version__, transformers.__version__)"; } > "$LOG/env.txt" 2>&1

t() {  # NAME LIMIT CMD...: bounded, logged, exit status kept; SKIP="name ..." leaves steps out
  local name=$1 limit=$2
  shift 2
  if [[ " ${SKIP:-} " == *" $name "* ]]; then echo skipped > "$LOG/$name.log"; echo - > "$LOG/$name.rc"; return; fi
  timeout -k 5 "$limit" "$@" > "$LOG/$name.log" 2>&1
  echo $? > "$LOG/$name.rc"
}
t test_numerics 330 $PY -m pytest -q -m gpu -p no:cacheprovider tests/numerics/gpu tests/numerics/test_fused_linear.py \
  tests/numerics/test_fused_quant.py tests/models &
t test_engine 200 $PY -m pytest -q -m gpu -p no:cacheprovider tests/rl/gpu &
t test_gluon_compile 60 $PY -m pytest -q -p no:cacheprovider tests/numerics/test_gluon_compile.py &
wait
t bench_rollout 190 $PY -m precision_engine.bench.rollout --model llama-3.1-8b --batch 64 --prompt 128 --gen 256 \
  --runs 2 --hf-runs 1 --out "$OUT/bench_rollout.json"
t profile_decode 60 $PY -m precision_engine.bench.rollout --profile 20 --prompt 256
t bench_block 90 $PY -c "$CLI" bench block --reps 10 --out "$OUT/bench_block.json"
t bench_invariant 90 $PY -m precision_engine.bench.invariant --quick --reps 30
t bench_ceiling 400 $PY -c "$CLI" bench ceiling --out "$OUT/bench_ceiling.json"
# torchao's Triton kernels autotune for minutes on their first calls (bench/torchao_ref.py): ours run first,
# every row is written as it is measured, and torchao_triton (its own GEMMs) is left out unless asked for.
PYTHONPATH=/tmp/ao:$PYTHONPATH t bench_linear "${LINEAR_LIMIT:-300}" $PY -c "$CLI" bench linear --quick \
  --variants "${LINEAR_VARIANTS:-bf16,fp8_cublas,fp8_bi,torchao}" --out "$OUT/bench_linear.json"
t bench_quant 60 $PY -c "$CLI" bench quant --sweep --only requant,dy --reps 30 --out "$OUT/bench_quant.json"

cp "$LOG/test_numerics.log" "$LOG/test_engine.log" "$LOG/test_gluon_compile.log" "$LOG/profile_decode.log" "$OUT/"
{
  cat "$LOG/env.txt"
  for name in test_numerics test_engine test_gluon_compile bench_rollout profile_decode bench_block bench_invariant bench_ceiling \
      bench_linear bench_quant; do
    echo "== $name rc=$(cat "$LOG/$name.rc")"
    grep -v "^\[W\|^STAGE:\|Warning\|warn(" "$LOG/$name.log" | tail -n 28 | cut -c1-220
  done
} > "$OUT/summary.txt" 2>&1
tail -c 11000 "$OUT/summary.txt"
