"""Render the Markdown tables of BENCHMARKS.md from the JSON that `precision bench` and `precision check` write.

Usage: python scripts/bench_tables.py benchmarks/2026-11-30
"""

import json
import sys
from pathlib import Path


def kernels(rows):
    print("| N x K | M | BF16 ms | cuBLAS FP8 ms | x | Triton FP8 (batch-invariant) ms | x |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        m = f"{r['m']} (graph)" if r["graphed"] else r["m"]
        print(f"| {r['n']}x{r['k']} | {m} | {r['bf16_ms']:.4f} | {r['cublas_ms']:.4f} | {r['cublas_x']:.2f} "
              f"| {r['triton_ms']:.4f} | {r['triton_x']:.2f} |")


def linear(rows):
    print("| N x K | M | pass | BF16 nn.Linear ms | fp8_cublas ms | x | fp8_bi ms | x |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        cublas = (f"{r['fp8_cublas_ms']:.4f} | {r['fp8_cublas_x']:.2f}" if "fp8_cublas_ms" in r else "- | -")
        print(f"| {r['n']}x{r['k']} | {r['m']} | {r['pass']} | {r['bf16_ms']:.4f} | {cublas} "
              f"| {r['fp8_bi_ms']:.4f} | {r['fp8_bi_x']:.2f} |")


# The shipped configurations; the JSON also holds the tile sweep behind them.
QUANT_KERNELS = ("1x128 act (triton)", "1x128 act (torch ref)", "128x1 tokens^T", "requant fp8 -> tokens^T",
                 "dy 1x128+tokens^T 2 kernels", "dy 1x128+tokens^T fused", "per-tensor (2 passes)", "128x128 weight")


def quant(doc):
    print(f"Device copy measured in the same run: {doc['copy_gbps']:.0f} GB/s (bytes read + written).\n")
    print("| kernel | shape | ms | GB/s | % of copy |")
    print("|---|---|---:|---:|---:|")
    for r in sorted((r for r in doc["rows"] if r["kernel"] in QUANT_KERNELS),
                    key=lambda r: QUANT_KERNELS.index(r["kernel"])):
        print(f"| {r['kernel']} | {r['shape'][0]}x{r['shape'][1]} | {r['ms']:.4f} | {r['gbps']:.0f} "
              f"| {r['pct_copy']:.1f} |")


def checks(folder):
    print("| policy | prefill max abs d logp | prefill mean KL | prefill bitwise | decode max abs d logp "
          "| decode mean KL | s | peak GiB |")
    print("|---|---:|---:|---|---:|---:|---:|---:|")
    for path in sorted(folder.glob("check_8b_*.json")):
        d = json.loads(path.read_text())
        p, dec = d["prefill"], d["decode"]
        print(f"| {d['policy']} | {p['max_abs_dlogp']:.3g} | {p['mean_kl']:.3g} | {'yes' if p['bitwise'] else 'no'} "
              f"| {dec['max_abs_dlogp']:.3g} | {dec['mean_kl']:.3g} | {d['seconds']} | {d['peak_cuda_gib']} |")


def main(folder: Path) -> None:
    for name, render in (("bench_kernels.json", kernels), ("bench_linear.json", linear)):
        doc = json.loads((folder / name).read_text())
        print(f"\n### {name}: `{doc['command']}`, {doc['env']}\n")
        render(doc["rows"])
    doc = json.loads((folder / "bench_quant.json").read_text())
    command = doc["command"] if "command" in doc else doc["meta"]["command"]  # before `precision bench quant`: meta
    print(f"\n### bench_quant.json: `{command}`\n")
    quant(doc)
    print("\n### precision check, Llama-3.1-8B shapes, random weights\n")
    checks(folder)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
