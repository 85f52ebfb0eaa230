import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from precision_engine.numerics import triton_gemm as TG

def compile_(fn, types, constexprs, **opts):
    sig = dict(zip(fn.arg_names, types + ["constexpr"] * len(constexprs)))
    attrs = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(types) if t.startswith("*")}
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts).asm["ptx"]

e4m3 = dict(FMAX=448.0, RFMAX=1 / 448.0, MBITS=3, EMIN=-6, POW2=False, EXACT_ROUND=False, E5M2=False)
for quant in (True, False):
    q = dict(QUANT_B=quant, **(e4m3 if quant else {k: v for k, v in TG._NO_TOKEN_QUANT.items() if k != "QUANT_B"}))
    dec = ["tensordesc<fp8e4nv[128, 128]>", "tensordesc<bf16[16, 128]>" if quant else "tensordesc<fp8e4nv[16, 128]>",
           "*bf16", "*fp32", "*i32", "*fp32", "*bf16" if quant else "*fp32"] + ["i32"] * 14
    ptx = compile_(TG._fp8_block_gemm_kernel, dec, dict(SCALE_AM=128, SCALE_BN=1, EVEN_K=True, SPLIT=True, FUSED_SUM=True,
                   TMA=True, FLATTEN=False, BLOCK_M=128, BLOCK_N=16, BLOCK_K=128, GROUP_M=1, **q), num_warps=4, num_stages=4)
    print("block", quant, "wgmma.mma_async" in ptx, "mma.sync" in ptx, ptx.count("cvt.rn.satfinite.e4m3x2"))
    per = ["tensordesc<fp8e4nv[128, 128]>", dec[1], "*bf16", "*fp32", "*fp32", dec[6]] + ["i32"] * 15
    ptx = compile_(TG._fp8_persistent_kernel, per, dict(SCALE_AM=128, SCALE_BN=1, EVEN_K=True, SPLIT=False, TMA=True,
                   FLATTEN=True, BLOCK_M=128, BLOCK_N=16, BLOCK_K=128, **q), num_warps=4, num_stages=4)
    print("persistent", quant, "wgmma.mma_async" in ptx, "mma.sync" in ptx)
print("ok")
