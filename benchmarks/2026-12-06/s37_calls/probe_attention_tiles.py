"""The batch-invariant attention's full forward under other launches, on one GPU: for each (rows per program, warps,
stages) the forward of 4 x 2048 and 1 x 8192 tokens (8B heads: 32 q / 8 kv, D = 128, bf16) is timed and its
bits compared with the first launch's (64 rows, 4 warps, 3 stages: the default since the thirty-seventh session)
and with decode steps (which keep the default's 64-row tile) at tile edges and 16 spread positions of each sequence. KV_BLOCK stays 64: it fixes each row's summation order.
Run it on two trees to compare kernels. Prints a table last."""

import torch

from precision_engine.bench.timing import median, time_cuda
from precision_engine.numerics import triton_attention as TA

LAUNCHES = [(64, 4, 3), (64, 4, 2), (64, 8, 2), (128, 8, 2), (128, 8, 3), (128, 4, 2)]
default_tiles, default_stages = TA._attention_tiles, TA.ATTN_STAGES
scale = 128 ** -0.5


def use(block_m, warps, stages):
    """Prefill launches (more rows than one default tile) take block_m rows and `warps`; decode keeps the default."""
    def tiles(fast, rows, fp8):
        if fast or rows <= TA.ATTN_BLOCK_M:
            return default_tiles(fast, rows, fp8)
        return block_m, TA.KV_BLOCK, warps, None
    TA._attention_tiles, TA.ATTN_STAGES = tiles, stages


def case(b, t):
    g = torch.Generator(device="cuda").manual_seed(b * t)
    q = torch.randn(b, 32, t, 128, device="cuda", generator=g).bfloat16()
    k, v = (torch.randn(b, 8, t, 128, device="cuda", generator=g).bfloat16() for _ in range(2))
    return q, k, v, torch.arange(t, device="cuda").repeat(b, 1), torch.full((b,), t, device="cuda")


rows = []
for b, t in ((4, 2048), (1, 8192)):
    q, k, v, q_pos, kv_len = case(b, t)
    use(*LAUNCHES[0])
    ref = TA.attention_forward(q, k, v, q_pos, kv_len, scale=scale)
    edges = [0, 1, 62, 63, 64, 65, 127, 128, 191, t - 65, t - 64, t - 2, t - 1]  # where a tile's masks start and end
    probe = sorted(set(edges + torch.linspace(0, t - 1, 16).long().tolist()))
    for launch in LAUNCHES:
        use(*launch)
        out = TA.attention_forward(q, k, v, q_pos, kv_len, scale=scale)
        same = torch.equal(out.view(torch.int16), ref.view(torch.int16))
        decode = all(torch.equal(
            TA.attention_forward(q[:, :, i:i + 1], k, v, q_pos[:, i:i + 1], kv_len, scale=scale).view(torch.int16),
            out[:, :, i:i + 1].view(torch.int16)) for i in probe)
        ms = median(time_cuda(lambda: TA.attention_forward(q, k, v, q_pos, kv_len, scale=scale), reps=30))
        rows.append((f"{b}x{t}", launch, ms, same, decode))
use(*LAUNCHES[0])
print(f"{'tokens':>8} {'rows/warps/stages':>18} {'fwd ms':>8} {'vs default':>10} {'bits = default':>15} "
      f"{'bits = decode':>14}")
base = {}
for shape, launch, ms, same, decode in rows:
    base.setdefault(shape, ms)
    print(f"{shape:>8} {'/'.join(map(str, launch)):>18} {ms:>8.3f} {base[shape] / ms:>9.2f}x {str(same):>15} "
          f"{str(decode):>14}")
