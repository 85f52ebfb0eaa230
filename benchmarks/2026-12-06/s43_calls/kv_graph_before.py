"""jetrl_unified_kv's batch-invariant block on the tree before this session's turns (e836a19's bench.block): does
its graphed step fail there too, and is its eager step host-bound there too? Write that module beside this script
first, untracked (a device call carries it):

    git show e836a19:precision_engine/bench/block.py > benchmarks/2026-12-06/s43_calls/block_before.py
"""
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import block_before  # noqa: E402

rows = block_before.bench_block(policies=("bf16_baseline", "jetrl_unified_kv"), modes=("batch-invariant",), reps=3)
print(block_before.format_table(rows))
