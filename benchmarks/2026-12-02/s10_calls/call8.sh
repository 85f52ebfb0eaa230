set -u
for wheel in .whl/*.whl; do
  case $(basename "$wheel") in torchao-*) ;; *) module=$(basename "$wheel" | cut -d- -f1 | tr A-Z a-z); module=${module/google_re2/re2}; module=${module/rpds_py/rpds}
    python3 -c "import $module" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel" ;; esac
done > /tmp/install.log 2>&1
export PYTHONPATH=/tmp/site:$PWD
timeout -k 5 80 python3 exp10/sweep_pkg.py $OUT/sweep_pkg.json > $OUT/sweep.log 2>&1
timeout -k 5 110 python3 -m pytest -q -m gpu -p no:cacheprovider tests/numerics/gpu/test_gemm_gpu.py -k "gluon_gives" > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
tail -15 $OUT/sweep.log; tail -3 $OUT/tests.log
