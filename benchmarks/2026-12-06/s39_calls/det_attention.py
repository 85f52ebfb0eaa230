"""Is the attention's backward deterministic run to run (main twice, the patch twice)? Same inputs as ab_attention."""
import sys

import torch

sys.argv = [sys.argv[0], sys.argv[1]]
exec(open(__file__.replace("det_attention", "ab_attention")).read().split("grads = {}")[0])
for name, module in (("main", main_ta), ("patch", patched_ta)):
    runs = []
    for _ in range(3):
        q.grad = k.grad = v.grad = None
        runs.append([g.clone() for g in step(module)])
    print(name, "run to run bitwise:", [all(torch.equal(a, b) for a, b in zip(runs[0], r)) for r in runs[1:]],
          "max |dq| diff:", max((a - b).abs().max().item() for r in runs[1:] for a, b in zip(runs[0], r)))
