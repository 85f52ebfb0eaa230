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
(timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/numerics/gpu/test_quant_gpu.py -k "silu or fused_producers" tests/models tests/numerics/test_fused_quant.py > $OUT/test_models.log 2>&1; echo "rc $?" >> $OUT/test_models.log) &
(timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/rl/gpu > $OUT/test_rl.log 2>&1; echo "rc $?" >> $OUT/test_rl.log) &
wait
timeout 120 python3 exp8/profile_step.py block 2>&1 | grep -v Warning > $OUT/profile_block.log
timeout 120 python3 -c "$CLI" bench block --reps 10 --out $OUT/bench_block.json > $OUT/bench_block.log 2>&1
tail -5 $OUT/test_models.log; tail -5 $OUT/test_rl.log; cat $OUT/profile_block.log; tail -18 $OUT/bench_block.log
