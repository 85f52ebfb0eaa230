"""Probe (seventeenth session, call 5): what a Triton launch costs the host here, through `kernel[grid](...)`
(JITFunction.run: binding, specialization, cache lookup) and through the compiled kernel it found, launched again
directly (`CompiledKernel[grid](*runtime_args)`), for the 1x128 activation quantizer at 8192x4096. Informs
whether a launch cache would cut the FP8 step's host time (call 4: 1.5-2.0 ms issued per step, BF16 0.2-0.5).
"""

import time

import torch

from precision_engine.numerics import triton_quant
from precision_engine.numerics.formats import PRESET_FORMATS as P

N = 300


def host_us(fn):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(400_000_000)
    start = time.perf_counter()
    for _ in range(N):
        fn()
    took = (time.perf_counter() - start) * 1e6 / N
    torch.cuda.synchronize()
    return took


def main():
    fmt = P["fp8_group_act"]
    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    q = triton_quant.quantize_rows(x, fmt)
    m, k = x.shape
    config = triton_quant._ROWS_CONFIG
    grid = (triton_quant.triton.cdiv(m, config["BLOCK_M"]), triton_quant.triton.cdiv(k // 128, config["GROUPS"]))
    args = (x, q.data, q.scale, m, k, x.stride(0), q.data.stride(0), q.scale.stride(0), q.scale.stride(1))
    constexprs = dict(G=128, BLOCK_G=128, **triton_quant._fmt_args(fmt, None), **config)
    jit = lambda: triton_quant._rows_kernel[grid](*args, **constexprs)  # noqa: E731
    print(f"quantize_rows (the wrapper): {host_us(lambda: triton_quant.quantize_rows(x, fmt)):.1f} us")
    print(f"_rows_kernel[grid](...) (JITFunction.run): {host_us(jit):.1f} us")
    caches = triton_quant._rows_kernel.device_caches[torch.cuda.current_device()][0]
    compiled = list(caches.values())
    print(f"compiled variants cached: {len(compiled)}")
    kernel = compiled[-1]
    for trial in (args, args[:5] + args[5:6] + args[6:7]):
        try:
            direct = lambda a=trial: kernel[grid](*a)  # noqa: E731
            q.data.view(torch.uint8).zero_()
            q.scale.zero_()
            direct()
            fresh = triton_quant.quantize_rows(x, fmt)
            same = torch.equal(fresh.data.view(torch.uint8), q.data.view(torch.uint8)) and torch.equal(fresh.scale,
                                                                                                     q.scale)
            print(f"CompiledKernel[grid] with {len(trial)} args: {host_us(direct):.1f} us (bytes as before: {same})")
        except Exception as err:  # noqa: BLE001
            print(f"CompiledKernel[grid] with {len(trial)} args failed: {type(err).__name__}: {str(err)[:200]}")
    print(f"torch.empty pair (q, scale): {host_us(lambda: (torch.empty_like(q.data), torch.empty_like(q.scale))):.1f} us")


if __name__ == "__main__":
    main()
