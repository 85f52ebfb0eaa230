# Sourced from the repository root by a device call's script: installs the carried wheels (.whl/, fetched by
# ../shared/tools/device-wheels, plus `device-wheels google-re2`, not in its default list) into /tmp/site and
# torchao's into /tmp/ao (on PYTHONPATH only where a step asks), exports PYTHONPATH, and stops the call (exit 3)
# when the core does not import, before any step spends device time on it. Defines `gpu_tests` (below).
for wheel in .whl/*.whl; do
  case $(basename "$wheel") in
    torchao-*) python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ao "$wheel" ;;
    *) python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel" ;;
  esac
done > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c "import precision_engine.policy, precision_engine.cli.app" || { echo "missing wheels in .whl/"; exit 3; }

# A GPU test step: `gpu_tests NAME SECONDS PYTEST_ARGS...` runs pytest -m gpu under that timeout, its log in
# $OUT/NAME.log, and prints its exit status and verdict lines (a timed-out step prints no summary line: its last
# PASSED lines say how far it got).
gpu_tests() {
  local name=$1 limit=$2
  shift 2
  timeout "$limit" python3 -m pytest -rf -p no:cacheprovider -m gpu -v "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc=$?"
  grep -E "PASSED|FAILED|passed|failed|Error|assert" "$OUT/$name.log" | tail -n 10 | cut -c1-300
}
