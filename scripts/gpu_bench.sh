#!/usr/bin/env bash
# The second GPU call (H200, ~8 minutes): the training-side benches, each time-bounded, JSON in $OUT, a summary
# last. torchao (0.18, from .whl/) goes into its own folder and onto the path of the linear/kernels benches only,
# so nothing else imports it.
#
#   run(command="bash scripts/gpu_bench.sh", carry=[".whl"])      # from the repo root, after gpu_session.sh's
#                                                                # wheels (same .whl/)
# Phases (limits in seconds): 1. bench block: one Llama-3.1-8B decoder layer, 8192 tokens, fwd and fwd+bwd per
# policy (150); 2. bench linear with torchao's Float8BlockwiseLinear (200); 3. bench kernels with torchao's
# Triton GEMM (120); 4. the quantizer sweep (60).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
PY=python3
export PYTHONPATH=$PWD
for wheel in .whl/*.whl; do
  case $(basename "$wheel") in
    torchao-*) $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/ao "$wheel" ;;
    *) module=$(basename "$wheel" | cut -d- -f1 | tr A-Z a-z); module=${module/google_re2/re2}; module=${module/rpds_py/rpds}
       $PY -c "import $module" 2>/dev/null || $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel" ;;
  esac
done > "$OUT/install.log" 2>&1
export PYTHONPATH=/tmp/site:$PYTHONPATH
CLI="from precision_engine.cli.app import main; main()"

step() {  # NAME LIMIT CMD...
  local name=$1 limit=$2
  shift 2
  timeout -k 10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "== $name rc=$?"
  grep -v "^\[W\|^STAGE:\|Warning" "$OUT/$name.log" | tail -n 60
}

step bench_block 150 $PY -c "$CLI" bench block --out "$OUT/bench_block.json"
PYTHONPATH=/tmp/ao:$PYTHONPATH step bench_linear 200 $PY -c "$CLI" bench linear --out "$OUT/bench_linear.json"
PYTHONPATH=/tmp/ao:$PYTHONPATH step bench_kernels 120 $PY -c "$CLI" bench kernels --out "$OUT/bench_kernels.json"
step bench_quant 60 $PY -m precision_engine.bench.quant --sweep --json "$OUT/bench_quant.json"
