"""Registers and spills of the Gluon training GEMM compiled offline for sm_90a (Triton 3.6's ptxas, no GPU):
the 1d2d form (128x128 weight blocks) against the 1x128-by-1x128 wgrad pair, the latter as the kernel a
wgrad launch specialises (scale strides (1, rows): Triton specialises the 1s).

    PYTHONPATH=$PWD /tmp/v36/bin/python benchmarks/2026-12-06/s41_calls/compile_gluon.py
"""
import os
import re
import subprocess
import tempfile

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.runtime.jit import mangle_type

from precision_engine.numerics import gluon_gemm as G

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")


def compile_report(fn, args: dict, constexprs: dict, num_warps=4):
    names = fn.arg_names
    sig, consts, attrs = {}, {}, {}
    for i, n in enumerate(names):
        if n in constexprs:
            sig[n] = "constexpr"
            consts[(i,)] = constexprs[n]
        elif n in args:
            v = args[n]
            t = mangle_type(v, True)
            sig[n] = t
            if t == "constexpr":
                consts[(i,)] = v
            elif isinstance(v, torch.Tensor) or (isinstance(v, int) and v % 16 == 0):
                attrs[(i,)] = [["tt.divisibility", 16]]
        else:  # default
            sig[n] = "constexpr"
            consts[(i,)] = fn.params[i].default
    src = GluonASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=num_warps))
    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        open(ptx, "w").write(k.asm["ptx"])
        rep = subprocess.run([os.path.join(BIN, "ptxas"), "-v", "-arch=sm_90a", ptx, "-o", cubin],
                             capture_output=True, text=True, check=True).stderr
    regs = re.search(r"Used (\d+) registers", rep).group(1)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", rep).groups()
    return regs, spill, k


def launch_args(m, n, k, scale_bn, block_n=128):
    a = torch.empty(m, k, dtype=torch.float8_e4m3fn)
    b = torch.empty(n, k, dtype=torch.float8_e4m3fn)
    c = torch.empty(m, n, dtype=torch.bfloat16)
    kb = triton.cdiv(k, 128)
    sa = torch.empty(kb, m).t()
    sb = torch.empty(kb, n).t() if scale_bn == 1 else torch.empty(n // 128, kb)
    d = lambda x, r, cc=128: TensorDescriptor.from_tensor(x, [r, cc], G._shared_layout(r, cc, x.dtype))
    return dict(a_desc=d(a, 128), b_desc=d(b, block_n), c_desc=d(c, 64, block_n), c_ptr=c, sa_ptr=sa, sb_ptr=sb,
                M=m, N=n, K=k, SEG_KB=kb, stride_cm=c.stride(0), stride_cn=c.stride(1),
                stride_sam=sa.stride(0), stride_sak=sa.stride(1), stride_sbn=sb.stride(0), stride_sbk=sb.stride(1))


if __name__ == "__main__":
    fn = G._gluon_block_gemm_kernel
    for scale_bn in (128, 1):
        args = launch_args(4096, 4096, 8192, scale_bn)
        r, s, _ = compile_report(fn, args, dict(SCALE_BN=scale_bn, GROUP_M=8, STAGES=6, TMA_STORE=True, SPLIT_N=False))
        print(f"SCALE_BN={scale_bn}: {r} registers, spill stores/loads {s}")

    from precision_engine.numerics import gluon_wgrad as W
    for m, n, k in ((4096, 4096, 8192), (28672, 4096, 16384), (1000, 4104, 384)):
        a = torch.empty(m, k, dtype=torch.float8_e4m3fn)
        b = torch.empty(n, k, dtype=torch.float8_e4m3fn)
        c = torch.empty(m, n, dtype=torch.bfloat16)
        kb = triton.cdiv(k, 128)
        sa, sb = torch.empty(kb, m).t(), torch.empty(kb, n).t()
        d = lambda x, r, cc=128: TensorDescriptor.from_tensor(x, [r, cc], G._shared_layout(r, cc, x.dtype))
        args = dict(a_desc=d(a, 128), b_desc=d(b, 128), sa_desc=W._scale_descriptor(sa, 128),
                    sb_desc=W._scale_descriptor(sb, 128), M=m, N=n, K=k)
        for split in (False, True):
            args["c_desc"] = d(c, 64, 64 if split else 128)
            r, s, kern = compile_report(W._gluon_pair_gemm_kernel, args, dict(GROUP_M=8, STAGES=5, SPLIT_N=split))
            print(f"pair {m}x{n}x{k} split {split}: {r} registers, spill stores/loads {s}")
    open("/tmp/pair.ptx", "w").write(kern.asm["ptx"])
