set -u
for wheel in .whl/*.whl; do
  case $(basename "$wheel") in
    torchao-*) ;;
    *) module=$(basename "$wheel" | cut -d- -f1 | tr A-Z a-z); module=${module/google_re2/re2}; module=${module/rpds_py/rpds}
       python3 -c "import $module" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel" ;;
  esac
done > /tmp/install.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/dgsite exp8/sgl_deep_gemm-*.whl > /tmp/dginstall.log 2>&1 || cat /tmp/dginstall.log
export PYTHONPATH=/tmp/site:/tmp/dgsite:$PWD CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
timeout 330 python3 exp8/dg_probe.py 2>&1 | grep -v Warning | tee $OUT/dg_probe.log | tail -60
timeout 90 python3 -m precision_engine.bench.quant --sweep --only requant,dy --reps 30 --json $OUT/bench_quant.json 2>&1 | tail -25
