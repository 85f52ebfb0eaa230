"""Where the FP8 linear step's host time goes at M = 128 (GPU idle): cProfile by cumulative and own time."""
import cProfile, pstats, io, torch
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.bench.linear import _specs, _train_step
lin = torch.nn.Linear(4096, 256, bias=False, device="cuda", dtype=torch.bfloat16)
xg = torch.randn(128, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
s, num = _specs()["fp8_bi"]
layer = Fp8Linear.from_linear(lin, s, numerics=num)
for _ in range(30): _train_step(layer, xg, dy)
torch.cuda.synchronize()
pr = cProfile.Profile(); pr.enable()
for _ in range(100): _train_step(layer, xg, dy)
pr.disable(); torch.cuda.synchronize()
for key, count in (("cumulative", 70), ("tottime", 45)):
    st = io.StringIO(); pstats.Stats(pr, stream=st).sort_stats(key).print_stats(count)
    lines = st.getvalue().splitlines(); i = next(j for j, l in enumerate(lines) if "ncalls" in l)
    print(f"===== by {key} (100 steps, seconds)")
    for l in lines[i:i + count + 1]:
        print(l.replace("/opt/torch/.venv/lib/python3.12/site-packages/", "").replace("/work/main/", "")[:200])
st = io.StringIO(); p = pstats.Stats(pr, stream=st); p.sort_stats("cumulative").print_callers("synchronize|item|_local_scalar|cpu|tolist|__bool__|__int__")
print(st.getvalue()[-3000:])
