set -u
for wheel in .whl/*.whl; do
  case $(basename "$wheel") in
    torchao-*) python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ao "$wheel" ;;
    *) module=$(basename "$wheel" | cut -d- -f1 | tr A-Z a-z); module=${module/google_re2/re2}; module=${module/rpds_py/rpds}
       python3 -c "import $module" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel" ;;
  esac
done > /tmp/install.log 2>&1
export PYTHONPATH=/tmp/site:$PWD
CLI="from precision_engine.cli.app import main; main()"
timeout -k 5 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/numerics/gpu/test_gemm_gpu.py -k gluon > $OUT/test_gluon.log 2>&1 &
timeout -k 5 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/rl/gpu > $OUT/test_rl.log 2>&1 &
wait
timeout -k 5 100 python3 scripts/gluon_sweep.py $OUT/gluon_sweep.json > $OUT/gluon_sweep.log 2>&1
timeout -k 5 80 python3 -c "$CLI" bench block --reps 10 --out $OUT/bench_block.json > $OUT/bench_block.log 2>&1
PYTHONPATH=/tmp/ao:$PYTHONPATH timeout -k 5 200 python3 -c "$CLI" bench linear --quick --variants bf16,fp8_cublas,fp8_bi,torchao --out $OUT/bench_linear.json > $OUT/bench_linear.log 2>&1
echo "== tests"; tail -2 $OUT/test_gluon.log $OUT/test_rl.log
echo "== sweep"; tail -15 $OUT/gluon_sweep.log
echo "== block"; tail -18 $OUT/bench_block.log
echo "== linear"; tail -22 $OUT/bench_linear.log | cut -c1-200
