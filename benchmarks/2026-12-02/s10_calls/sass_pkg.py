import os, subprocess, sys, tempfile
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from triton.runtime.jit import mangle_type
from precision_engine.numerics import gluon_gemm as G
fn = G._gluon_block_gemm_kernel
fp8 = torch.empty(512, 512, dtype=torch.float8_e4m3fn)
descs = {"a_desc": G._descriptor(fp8, 128), "b_desc": G._descriptor(fp8, 128),
         "c_desc": G._descriptor(torch.empty(512, 512, dtype=torch.bfloat16), 64, 64)}
cx = {"SCALE_BN": 128, "GROUP_M": 8, "STAGES": 6, "TMA_STORE": True, "SPLIT_N": True}
sig = {n: mangle_type(descs[n]) if n in descs else "constexpr" if n in cx else ("*fp32" if n in ("sa_ptr", "sb_ptr") else "*bf16" if n == "c_ptr" else "i32") for n in fn.arg_names}
src = GluonASTSource(fn, sig, {(fn.arg_names.index(k),): v for k, v in cx.items()})
kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
d = tempfile.mkdtemp(); open(f"{d}/k.ptx", "w").write(kernel.asm["ptx"])
ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
print(subprocess.run([ptxas, "-v", "-arch=sm_90a", f"{d}/k.ptx", "-o", f"{d}/k.cubin"], capture_output=True, text=True).stderr[-300:])
sass = subprocess.run([os.path.join(os.path.dirname(ptxas), "cuobjdump"), "-sass", f"{d}/k.cubin"], capture_output=True, text=True).stdout
open("/tmp/pkg.sass", "w").write(sass)
