set -u
SKIP="bench_linear bench_quant bench_rollout profile_decode bench_invariant" bash scripts/gpu_final.sh > /tmp/gf.txt 2>&1
export PYTHONPATH=/tmp/site:$PWD
timeout 100 python3 exp9/profile_step.py block 2>&1 | grep -v Warning > $OUT/profile_block.log
timeout 80 python3 exp9/profile_ops.py 2>&1 | grep -v Warning > $OUT/profile_ops.log
grep "passed\|failed\|error" $OUT/test_*.log | tail -12
grep -A3 "FAILED\|Error" $OUT/test_numerics.log | head -40
sed -n '/== bench_block/,$p' $OUT/summary.txt | head -30
cat $OUT/profile_block.log | head -60
head -40 $OUT/profile_ops.log
