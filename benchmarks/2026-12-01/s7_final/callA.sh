set -u
SKIP="bench_rollout profile_decode bench_invariant bench_linear bench_quant" bash scripts/gpu_final.sh > /tmp/final.txt 2>&1
export PYTHONPATH=/tmp/site:$PWD
timeout -k 5 120 python3 scripts/gluon_sweep.py $OUT/gluon_sweep.json > $OUT/gluon_sweep.log 2>&1
tail -c 5500 /tmp/final.txt
tail -18 $OUT/gluon_sweep.log
