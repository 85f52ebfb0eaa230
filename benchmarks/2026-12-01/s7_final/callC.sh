set -u
for wheel in .whl/*.whl; do
  case $(basename "$wheel") in torchao-*) ;; *) module=$(basename "$wheel" | cut -d- -f1 | tr A-Z a-z); module=${module/google_re2/re2}; module=${module/rpds_py/rpds}
    python3 -c "import $module" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel" ;; esac
done > /tmp/install.log 2>&1
export PYTHONPATH=/tmp/site:$PWD
CLI="from precision_engine.cli.app import main; main()"
timeout -k 5 60 python3 -c "$CLI" bench linear --quick --variants bf16,fp8_cublas,fp8_bi --out $OUT/bench_linear_noao.json > $OUT/bench_linear_noao.log 2>&1
timeout -k 5 170 python3 -m precision_engine.bench.rollout --model llama-3.1-8b --batch 64 --prompt 128 --gen 256 --runs 2 --no-transformers --out $OUT/bench_rollout.json > $OUT/bench_rollout.log 2>&1
echo "== linear"; tail -8 $OUT/bench_linear_noao.log | cut -c1-160
echo "== rollout"; tail -14 $OUT/bench_rollout.log | cut -c1-200
