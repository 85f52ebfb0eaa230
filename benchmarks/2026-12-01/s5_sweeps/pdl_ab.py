"""A/B of programmatic dependent launch: decode-step ms (graph replays, CUDA events) and end-to-end tok/s,
BF16 and FP8 W8A8 + FP8 KV, fast mode, PDL off then on, one process."""
import json, os, statistics, sys
import torch
from precision_engine.bench import rollout as R
from precision_engine.models.loader import resolve_config

config = resolve_config("llama-3.1-8b")
model = R.random_decoder(config, device="cuda", seed=0)
ids = torch.randint(0, config["vocab_size"], (64, 128), device="cuda", generator=torch.Generator(device="cuda").manual_seed(1))
from precision_engine.numerics import triton_gemm as TG  # PREFETCH_BUDGET: with pdl_experiment.patch only
modes = sys.argv[1].split(",") if len(sys.argv) > 1 else ["0", "1"]  # pdl[:prefetch MiB]
rows = []
for pdl in modes:
    os.environ["PRECISION_PDL"] = pdl.split(":")[0]
    if ":" in pdl:
        TG.PREFETCH_BUDGET = int(pdl.split(":")[1]) << 20
    for label, pol in (R.FORMATS[0], R.FORMATS[2]):
        engine = R._engine(model, "llama-3.1-8b", pol, False, ids)
        engine.generate(ids.tolist(), max_new_tokens=24, temperature=1.0, seed=0)
        g = engine._graph
        steps = []
        for rep in range(7):
            g.state.step.fill_(1)
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(20):
                g.replay()
            e.record()
            torch.cuda.synchronize()
            steps.append(s.elapsed_time(e) / 20)
        prompts = ids.tolist()
        rate, secs = R.timed_calls(lambda: int(engine.generate(prompts, max_new_tokens=256, temperature=1.0, seed=0).generated_mask.sum()), int(os.environ.get('AB_RUNS', '2')))
        row = {"early": os.environ.get("PRECISION_PDL_EARLY", "1"), "pdl": pdl, "variant": label, "step_ms": statistics.median(steps[1:]), "tok_s": rate, "seconds": secs}
        rows.append(row)
        print(json.dumps(row), flush=True)
        del engine, g
        R._release()
for r in rows:
    print(f"early={r['early']} pdl={r['pdl']} {r['variant']:<20} step {r['step_ms']:.3f} ms  {r['tok_s']:.0f} tok/s")
by = {(r["pdl"], r["variant"]): r for r in rows}
for pdl in modes:
    b, f = by.get((pdl, "bf16")), by.get((pdl, "fp8 w8a8 + fp8 kv"))
    if b and f:
        print(f"pdl={pdl}: fp8+kv / bf16 = {f['tok_s'] / b['tok_s']:.3f}x tok/s, {b['step_ms'] / f['step_ms']:.3f}x step")
