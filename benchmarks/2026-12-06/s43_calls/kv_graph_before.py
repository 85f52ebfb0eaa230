"""jetrl_unified_kv's batch-invariant block on the tree before this session's turns (`block_before.py`, e836a19's
bench.block): does its graphed step fail there too, and is its eager step host-bound there too?"""
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import block_before  # noqa: E402

rows = block_before.bench_block(policies=("bf16_baseline", "jetrl_unified_kv"), modes=("batch-invariant",), reps=3)
print(block_before.format_table(rows))
