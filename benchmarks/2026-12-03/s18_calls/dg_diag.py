"""Where `import deep_gemm` crashed in call 1 (a segfault before any output): each stage prints before the next,
with faulthandler's Python trace on a crash. argv[1]: the DeepGEMM root holding deep_gemm/_C.so."""
import faulthandler
import sys

faulthandler.enable()
root = sys.argv[1]
import torch  # noqa: E402

torch.cuda.init()
print("torch", torch.__version__, torch.cuda.get_device_name(), flush=True)
sys.path.insert(0, root)
import deep_gemm  # noqa: E402

print("import deep_gemm ok", deep_gemm.get_num_sms(), flush=True)
a = torch.randn(256, 512, device="cuda").to(torch.float8_e4m3fn)
b = torch.randn(256, 512, device="cuda").to(torch.float8_e4m3fn)
sa = torch.ones(4, 256, device="cuda").t()
sb = torch.ones(2, 4, device="cuda")
d = torch.empty(256, 256, device="cuda", dtype=torch.bfloat16)
deep_gemm.fp8_gemm_nt((a, sa), (b, sb), d)
torch.cuda.synchronize()
ref = (a.float() @ b.float().t())
print("gemm ok, max |d - ref| / max |ref|", ((d.float() - ref).abs().max() / ref.abs().max()).item(), flush=True)
