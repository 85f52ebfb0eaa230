set -u
for wheel in .whl/*.whl; do
  case $(basename "$wheel") in torchao-*) ;; *) module=$(basename "$wheel" | cut -d- -f1 | tr A-Z a-z); module=${module/google_re2/re2}; module=${module/rpds_py/rpds}
    python3 -c "import $module" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel" ;; esac
done > /tmp/install.log 2>&1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv
timeout -k 5 ${LIMIT:-300} python3 exp7/sweep7.py $OUT/sweep7.json 2>&1 | tail -${TAIL:-60}
