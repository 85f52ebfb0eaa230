"""Offline sm_90 compile of the split kernel (Triton 3.6): ptxas report (registers, spills, C7514)."""
import os, subprocess, sys, tempfile
import torch, triton
sys.path.insert(0, os.path.dirname(__file__))
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from triton.runtime.jit import mangle_type
from precision_engine.numerics import gluon_gemm as G
import gl_split

fn = gl_split._split_kernel
fp8 = torch.empty(512, 512, dtype=torch.float8_e4m3fn)
descs = {"a_desc": G._descriptor(fp8, 128), "b_desc": G._descriptor(fp8, 128),
         "c_desc": G._descriptor(torch.empty(512, 512, dtype=torch.bfloat16), 64, 64)}
cx = {"SCALE_BN": 128, "GROUP_M": 8, "STAGES": int(os.environ.get("ST", 6)), "REGS": int(sys.argv[1]) if len(sys.argv) > 1 else 232, "TOTAL_SMEM": bool(int(os.environ.get("TS", "0")))}
sig = {}
for name in fn.arg_names:
    sig[name] = mangle_type(descs[name]) if name in descs else "constexpr" if name in cx else \
        ("*fp32" if name in ("sa_ptr", "sb_ptr") else "i32")
src = GluonASTSource(fn, sig, {(fn.arg_names.index(k),): v for k, v in cx.items()})
kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
d = tempfile.mkdtemp()
open(f"{d}/k.ptx", "w").write(kernel.asm["ptx"])
ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
r = subprocess.run([ptxas, "-v", "-arch=sm_90a", f"{d}/k.ptx", "-o", os.devnull], capture_output=True, text=True)
print(r.stderr[-3000:])
if os.environ.get("SASS"):
    subprocess.run([ptxas, "-arch=sm_90a", f"{d}/k.ptx", "-o", f"{d}/k.cubin"], check=True)
    sass = subprocess.run([os.path.join(os.path.dirname(ptxas), "cuobjdump"), "-sass", f"{d}/k.cubin"], capture_output=True, text=True).stdout
    open(os.environ["SASS"], "w").write(sass)
