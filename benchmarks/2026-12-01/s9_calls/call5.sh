set -u
for wheel in .whl/*.whl; do
  case $(basename "$wheel") in
    torchao-*) ;;
    *) module=$(basename "$wheel" | cut -d- -f1 | tr A-Z a-z); module=${module/google_re2/re2}; module=${module/rpds_py/rpds}
       python3 -c "import $module" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel" ;;
  esac
done > /tmp/install.log 2>&1
export PYTHONPATH=/tmp/site:$PWD
CLI="from precision_engine.cli.app import main; main()"
timeout 60 python3 -c "$CLI" bench block --reps 10 --out $OUT/bench_block.json > $OUT/bench_block.log 2>&1
timeout 50 python3 -m pytest -q -m gpu -p no:cacheprovider tests/numerics/gpu/test_gemm_gpu.py -k gluon -x > $OUT/test_gluon.log 2>&1
tail -2 $OUT/test_gluon.log; tail -18 $OUT/bench_block.log
