set -u
SKIP="bench_linear bench_quant bench_rollout profile_decode bench_invariant bench_block" bash scripts/gpu_final.sh > /tmp/gf.txt 2>&1
export PYTHONPATH=/tmp/site:$PWD
CLI="from precision_engine.cli.app import main; main()"
timeout 150 python3 exp9/ab_launch.py $OUT/ab_launch.json > $OUT/ab_launch.log 2>&1
timeout 90 python3 -c "$CLI" bench block --reps 10 --out $OUT/bench_block.json > $OUT/bench_block.log 2>&1
grep "passed\|failed\|error" $OUT/test_*.log | tail -8
grep -B2 -A12 "FAILED\|Error\|assert" $OUT/test_numerics.log $OUT/test_engine.log | head -50
grep -v "Warn\|warn" $OUT/ab_launch.log | tail -40
tail -18 $OUT/bench_block.log
