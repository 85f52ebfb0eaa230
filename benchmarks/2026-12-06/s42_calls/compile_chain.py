"""Registers and spills of the chain decode kernel compiled offline for sm_90a (Triton 3.6's ptxas, no GPU), with
and without QUANTIZE (the tokens quantized by the grid), at the launches `chain_config` gives the 8B shapes.

    PYTHONPATH=$PWD /tmp/v36/bin/python benchmarks/2026-12-06/s42_calls/compile_chain.py [--ptx DIR]
"""
import os
import re
import subprocess
import sys
import tempfile

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.runtime.jit import mangle_type

from precision_engine.numerics import gluon_chain as C
from precision_engine.numerics import gluon_gemm as G
from precision_engine.numerics import triton_quant as T
from precision_engine.numerics.formats import PRESET_FORMATS

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")


def compile_report(fn, args: dict, constexprs: dict, options: dict):
    sig, consts, attrs = {}, {}, {}
    for i, n in enumerate(fn.arg_names):
        if n in constexprs:
            sig[n] = "constexpr"
            consts[(i,)] = constexprs[n]
        else:
            v = args[n]
            t = mangle_type(v, True)
            sig[n] = t
            if t == "constexpr":  # Triton specialises ints equal to 1
                consts[(i,)] = v
            elif isinstance(v, torch.Tensor) or (isinstance(v, int) and v % 16 == 0):
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = GluonASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        open(ptx, "w").write(k.asm["ptx"])
        rep = subprocess.run([os.path.join(BIN, "ptxas"), "-v", "-arch=sm_90a", ptx, "-o", cubin],
                             capture_output=True, text=True, check=True).stderr
    regs = re.search(r"Used (\d+) registers", rep).group(1)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", rep).groups()
    return regs, spill, k


def chain_args(m, n, k, quantize):
    fmt = PRESET_FORMATS["fp8_group_act"]
    config = C.chain_config(m, n, k, 132)
    a = torch.empty(m, k, dtype=torch.float8_e4m3fn)
    sa = torch.empty(-(-k // 128), m).t()
    b = torch.empty(n, k, dtype=torch.float8_e4m3fn)
    sb = torch.empty(-(-n // 128), -(-k // 128))
    c = torch.empty(m, n, dtype=torch.bfloat16)
    raw = torch.empty(m, k, dtype=torch.bfloat16) if quantize else a
    w_head, w_copies = C.pieces(C.tiles(config, m)[0])
    x_head, x_copies = C.pieces(C.live_token_rows(config, m))
    d = lambda t, r: TensorDescriptor.from_tensor(t, [r, 128], G._shared_layout(r, 128, t.dtype))
    slot_w, slot_t = C.slots(config, m)
    q = T._fmt_args(fmt, False) if quantize else getattr(C, "_NO_QUANTIZE", {})
    args = dict(w_desc=d(b, w_head), w_grain=d(b, 8) if w_copies else d(b, w_head), x_desc=d(a, x_head),
                x_grain=d(a, 8) if x_copies else d(a, x_head), c_ptr=c, sx_ptr=sa, sw_ptr=sb, raw_ptr=raw, xq_ptr=a,
                M=m, N=n, K=k, stride_cm=c.stride(0), stride_sxm=sa.stride(0),
                stride_sxk=sa.stride(1), stride_swn=sb.stride(0), stride_swk=sb.stride(1), stride_raw=raw.stride(0),
                stride_xq=a.stride(0))
    consts = dict(SCALE_BN=128, STAGES=C.ring_slots(config, m, k, quantize), TRIP=config.trip, AHEAD=config.ahead,
                  KB_PAD=C.kb_pad(k), WEIGHT_ON_M=not config.weight_rows, BLOCK_W=slot_w, BLOCK_T=slot_t,
                  W_COPIES=w_copies, X_COPIES=x_copies, QUANTIZE=quantize,
                  FMAX=q.get("FMAX"), RFMAX=q.get("RFMAX"),
                  MBITS=q.get("MBITS"), EMIN=q.get("EMIN"), POW2=q.get("POW2"))
    options = dict(num_warps=4)
    if config.per_sm == 2:
        options["maxnreg"] = C.SM_REGISTERS // (2 * C.PROGRAM_THREADS)
    return args, consts, options, config


if __name__ == "__main__":
    out_dir = sys.argv[sys.argv.index("--ptx") + 1] if "--ptx" in sys.argv else None
    for n, k in ((4096, 4096), (6144, 4096), (1024, 4096), (12288, 4096), (4096, 14336)):
        for m in (1, 8, 16, 64):
            for quantize in (False, True) if C.quantizes_tokens(m, n, k, 132) else (False,):
                args, consts, options, config = chain_args(m, n, k, quantize)
                regs, spill, kern = compile_report(C._gluon_chain_decode_kernel, args, consts, options)
                print(f"{n}x{k} M={m} quantize={quantize} {config}: {regs} registers, spills {spill}", flush=True)
                if out_dir:
                    os.makedirs(out_dir, exist_ok=True)
                    open(f"{out_dir}/{n}x{k}_m{m}_q{int(quantize)}.ptx", "w").write(kern.asm["ptx"])
