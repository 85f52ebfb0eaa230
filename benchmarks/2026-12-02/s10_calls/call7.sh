set -u
for wheel in .whl/*.whl; do
  case $(basename "$wheel") in torchao-*) ;; *) module=$(basename "$wheel" | cut -d- -f1 | tr A-Z a-z); module=${module/google_re2/re2}; module=${module/rpds_py/rpds}
    python3 -c "import $module" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel" ;; esac
done > /tmp/install.log 2>&1
export PYTHONPATH=/tmp/site:$PWD
CLI="from precision_engine.cli.app import main; main()"
timeout -k 5 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/numerics/gpu/test_gemm_gpu.py tests/numerics/gpu/test_linear_gpu.py > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
timeout -k 5 30 python3 -m pytest -q -p no:cacheprovider tests/numerics/test_gluon_compile.py > $OUT/compile.log 2>&1
timeout -k 5 90 python3 exp10/sweep_pkg.py $OUT/sweep_pkg.json > $OUT/sweep.log 2>&1
timeout -k 5 90 python3 -c "$CLI" bench block --reps 10 --out $OUT/bench_block.json > $OUT/block.log 2>&1
timeout -k 5 120 python3 -c "$CLI" bench linear --quick --variants bf16,fp8_cublas,fp8_bi --out $OUT/bench_linear.json > $OUT/linear.log 2>&1
tail -3 $OUT/tests.log; tail -2 $OUT/compile.log; tail -15 $OUT/sweep.log; grep -v "^\[W\|Warn\|warn" $OUT/block.log | tail -18; tail -8 $OUT/linear.log
