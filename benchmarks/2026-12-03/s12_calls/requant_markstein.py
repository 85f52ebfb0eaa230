"""Does the re-quantizer's Markstein division give the reference's bytes on this GPU? (It did not on
2026-12-01; CPU emulation with exact FMAs says it should.) Dumps mismatches with their operands, and times it."""
import torch

from precision_engine.bench.timing import median, time_cuda
from precision_engine.numerics import quantize as Q
from precision_engine.numerics import triton_quant as T
from precision_engine.numerics.formats import PRESET_FORMATS

fmt = PRESET_FORMATS["fp8_group_act"]
gen = torch.Generator(device="cuda").manual_seed(3)
for label, spread in (("rows 1e-7..1e7", 4.0), ("rows 1e-2..1e2", 1.0), ("plain randn", 0.0)):
    x = torch.randn((8192 + 7, 4096), device="cuda", generator=gen)
    x = (x * torch.exp(torch.randn(x.shape[0], 1, device="cuda", generator=gen) * spread)).to(torch.bfloat16)
    saved = Q.quantize_rows_1xG(x, fmt)
    ref = Q.requantize_tokens_transposed(saved, backend="reference")
    for ieee in (True, False):  # the launcher compiles the re-quantizer without FP contraction either way
        config = dict(T._REQUANT_CONFIG)
        got = T._launch_tokens_t(saved.data, saved.scale, fmt.group, ref.fmt, config, None, ieee)
        bad = (got.data.view(torch.uint8) != ref.data.view(torch.uint8))
        sbad = ~((got.scale == ref.scale) | (got.scale.isnan() & ref.scale.isnan()))
        ms = median(time_cuda(lambda: T._launch_tokens_t(saved.data, saved.scale, fmt.group, ref.fmt, config, None,
                                                         ieee), warmup=5, reps=30))
        print(f"{label:16s} ieee_div={ieee!s:5s}: {int(bad.sum())} wrong bytes, "
              f"{int(sbad.sum())} wrong scales, {ms:.4f} ms")
        if bad.any():
            c, t = (i[:6] for i in bad.nonzero(as_tuple=True))
            deq = Q.dequantize(saved).float()
            xs = deq[t, c]
            sc = ref.scale[c, t // 128] if ref.scale.shape[0] == ref.data.shape[0] else ref.scale.t()[c, t // 128]
            print("   x:", xs.tolist()); print("   s:", sc.tolist())
            print("   x/s exact-ish (fp64):", (xs.double() / sc.double()).tolist())
            print("   got:", got.data.view(torch.uint8)[c, t].tolist(), "ref:", ref.data.view(torch.uint8)[c, t].tolist())
