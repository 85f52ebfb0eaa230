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
(timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/numerics/gpu/test_triton_launch_gpu.py tests/numerics/gpu/test_gemm_gpu.py tests/numerics/gpu/test_triton_sampling_gpu.py tests/numerics/gpu/test_linear_gpu.py > $OUT/test_launch.log 2>&1; echo "rc $?" >> $OUT/test_launch.log) &
(timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/rl/gpu > $OUT/test_rl.log 2>&1; echo "rc $?" >> $OUT/test_rl.log) &
wait
timeout 150 python3 exp9/ab_launch.py $OUT/ab_launch.json > $OUT/ab_launch.log 2>&1
timeout 80 python3 -c "$CLI" bench block --reps 10 --out $OUT/bench_block.json > $OUT/bench_block.log 2>&1
tail -3 $OUT/test_launch.log; tail -2 $OUT/test_rl.log
grep -B2 -A15 "^E \|FAILED" $OUT/test_launch.log $OUT/test_rl.log | head -40
grep -v "Warn\|warn" $OUT/ab_launch.log | tail -40
tail -18 $OUT/bench_block.log
