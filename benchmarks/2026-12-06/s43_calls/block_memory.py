"""`bench block`'s default run (five policies, both modes: ten layers of their own, each graphed) with DeepGEMM
absent, and the peak GPU memory it allocated: what timing every policy and mode in turns costs in memory."""
import torch

from precision_engine.bench.block import bench_block, format_table

rows = bench_block(reps=5, rounds=1)
print(format_table(rows))
print(f"peak allocated {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB of "
      f"{torch.cuda.get_device_properties(0).total_memory / 2**30:.1f} GiB")
