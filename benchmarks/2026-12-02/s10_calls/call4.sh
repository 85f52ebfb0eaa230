set -u
for wheel in .whl/*.whl; do
  case $(basename "$wheel") in torchao-*) ;; *) module=$(basename "$wheel" | cut -d- -f1 | tr A-Z a-z); module=${module/google_re2/re2}; module=${module/rpds_py/rpds}
    python3 -c "import $module" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel" ;; esac
done > /tmp/install.log 2>&1
export PYTHONPATH=/tmp/site:$PWD
timeout -k 5 ${LIMIT:-240} python3 exp10/sweep10.py $OUT/sweep10.json > $OUT/sweep.log 2>&1
echo rc=$?
tail -20 $OUT/sweep.log
