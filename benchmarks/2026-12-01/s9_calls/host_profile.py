"""Host (Python) time of the FP8 linear's training step and of the 8B block: cProfile, top functions by own time."""
import cProfile, pstats, io, sys, time, statistics
import torch
from precision_engine.bench.linear import _specs, _train_step as lin_step
from precision_engine.numerics.linear import Fp8Linear

def prof(label, fn, steps=40):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    hosts = []
    for _ in range(steps):
        torch.cuda.synchronize(); t = time.perf_counter(); fn(); hosts.append((time.perf_counter() - t) * 1e3)
    torch.cuda.synchronize()
    pr = cProfile.Profile(); pr.enable()
    for _ in range(steps):
        fn()
    pr.disable(); torch.cuda.synchronize()
    s = io.StringIO(); st = pstats.Stats(pr, stream=s); st.sort_stats("tottime").print_stats(32)
    print(f"==== {label}: host {statistics.median(hosts):.3f} ms/step (no profiler)")
    out = s.getvalue().splitlines()
    start = next(i for i, l in enumerate(out) if "ncalls" in l)
    for l in out[start:start + 34]:
        print("  " + l.replace("/root/", "").replace("/usr/lib/python3/dist-packages/", "")[:190])
    sys.stdout.flush()

n, k = 4096, 4096
lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
xs = torch.randn(8192, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dys = torch.randn(8192, n, device="cuda", dtype=torch.bfloat16)
prof("bf16 4096x4096", lambda: lin_step(lin, xs, dys))
for name, (s, num) in _specs().items():
    layer = Fp8Linear.from_linear(lin, s, numerics=num)
    prof(f"{name} 4096x4096", lambda: lin_step(layer, xs, dys))
