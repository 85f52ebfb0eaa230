#!/usr/bin/env bash
# One GPU call (H200, ~7 minutes) that yields everything: the GPU tests, the batch-invariant kernel bench, the
# rollout bench and a profile of the decode step, each time-bounded and run past failures; logs, JUnit XML and
# JSON land in $OUT, a short summary prints last.
#
#   run(command="bash scripts/gpu_session.sh", carry=[".whl"])      # from the repo root
#
# .whl/ (git-ignored) holds wheels the device image may lack; fetch them here first with
#   ../shared/tools/device-wheels google-re2 jsonschema jsonschema-specifications referencing rpds-py attrs \
#       typing-extensions pytest pluggy iniconfig packaging typer click shellingham safetensors
# Only the wheels whose module does not import on the device are installed (into /tmp/site); the package itself
# runs from the checkout (PYTHONPATH=.), nothing is pip-installed from a registry.
#
# Phases (limits in seconds): 1. three pytest runs side by side (correctness only; 200 each): every GPU-marked
# numerics test, the engine (tests/rl/gpu), the rest (bench, models, rewrite, verify); 2. bench.invariant --quick
# (30); 3. bench.rollout on Llama-3.1-8B shapes, batch 64, 128 + 256 tokens (220; rows are written as they
# finish, so a cut run keeps what it measured); 4. bench.rollout --profile 20: kernels per decode step and the
# top 15 by GPU time, BF16 and W8A8 + FP8 KV, fast mode (60). Worst case ~8.5 minutes (phase 1 as changed on
# 2026-12-01 has not run in this form yet; scripts/gpu_final.sh ran its tests that day).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
PY=python3
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

{
  $PY --version; nvidia-smi -L 2>&1 | head -4
  $PY -c "import torch, triton, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'triton', triton.__version__, 'transformers', transformers.__version__)"
} > "$OUT/env.txt" 2>&1

wheels=()
for pair in re2:google_re2 jsonschema:jsonschema- jsonschema_specifications:jsonschema_specifications \
    referencing:referencing rpds:rpds_py attrs:attrs typing_extensions:typing_extensions pytest:pytest- \
    pluggy:pluggy iniconfig:iniconfig packaging:packaging typer:typer click:click shellingham:shellingham \
    safetensors:safetensors; do
  module=${pair%%:*}
  prefix=${pair#*:}
  if ! $PY -c "import $module" 2>/dev/null; then
    for wheel in .whl/${prefix}*.whl; do [ -e "$wheel" ] && wheels+=("$wheel"); done
  fi
done
if [ ${#wheels[@]} -gt 0 ]; then  # all at once; one by one if a wheel does not fit this Python
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "${wheels[@]}" >> "$OUT/env.txt" 2>&1 \
    || for wheel in "${wheels[@]}"; do
         $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel" >> "$OUT/env.txt" 2>&1
       done
  export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
echo "installed from .whl: ${wheels[*]:-none}" >> "$OUT/env.txt"

# step NAME LIMIT CMD...: run CMD under a time limit, output to $OUT/NAME.log, exit status to $OUT/NAME.rc
step() {
  local name=$1 limit=$2
  shift 2
  timeout -k 10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo $? > "$OUT/$name.rc"
}

pytest_gpu() {  # NAME LIMIT ARGS...: one pytest run of GPU-marked tests with a JUnit report
  local name=$1 limit=$2
  shift 2
  step "$name" "$limit" $PY -m pytest -q -m gpu -p no:cacheprovider --junitxml="$OUT/$name.xml" "$@"
}

pytest_gpu test_numerics 200 tests/numerics/ &  # every GPU-marked numerics test: kernels, linear, quantizers
pytest_gpu test_engine 200 tests/rl/gpu/ &  # no -x: every engine property reports
pytest_gpu test_rest 200 tests/bench tests/models tests/rewrite tests/verify &
wait

step bench_invariant 30 $PY -m precision_engine.bench.invariant --quick
step bench_rollout 220 $PY -m precision_engine.bench.rollout --model llama-3.1-8b --batch 64 --prompt 128 \
  --gen 256 --runs 3 --hf-runs 1 --out "$OUT/bench_rollout.json"
step profile_decode 60 $PY -m precision_engine.bench.rollout --model llama-3.1-8b --batch 64 --prompt 128 \
  --profile 20

$PY - "$OUT" <<'EOF'
import json, pathlib, sys
import xml.etree.ElementTree as ET

out = pathlib.Path(sys.argv[1])
print((out / "env.txt").read_text().strip())
print("\n== tests (exit status: 0 passed, 124/137 timed out)")
for name in ("test_numerics", "test_engine", "test_rest"):
    rc = (out / f"{name}.rc").read_text().strip() if (out / f"{name}.rc").exists() else "?"
    line = f"{name:<24} rc={rc}"
    if (out / f"{name}.xml").exists():
        suite = ET.parse(out / f"{name}.xml").getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        line += "  " + " ".join(f"{k}={suite.get(k)}" for k in ("tests", "failures", "errors", "skipped", "time"))
        for case in suite.iter("testcase"):
            bad = case.find("failure") if case.find("failure") is not None else case.find("error")
            if bad is not None:
                line += f"\n    FAILED {case.get('name')}: {(bad.get('message') or '')[:300]}"
    print(line)
print("\n== bench.invariant --quick (rc=%s)" % (out / "bench_invariant.rc").read_text().strip())
print("\n".join((out / "bench_invariant.log").read_text().strip().splitlines()[-12:]))
print("\n== bench.rollout (rc=%s)" % (out / "bench_rollout.rc").read_text().strip())
path = out / "bench_rollout.json"
if path.exists():
    from precision_engine.bench.rollout import format_table
    print(format_table(json.loads(path.read_text())["rows"]))
else:
    print("\n".join((out / "bench_rollout.log").read_text().strip().splitlines()[-15:]))
print("\n== decode profile, 20 graph replays (rc=%s)" % (out / "profile_decode.rc").read_text().strip())
lines = (out / "profile_decode.log").read_text().strip().splitlines()
print("\n".join([line for line in lines if not line.startswith(("STAGE:", "[W", "USDT"))][-40:]))
EOF
