"""SASS instructions per element of the shipped Triton quantizers (tokens, re-quantizer, 1x128 rows, weight
blocks), compiled offline for sm_90, and the time the H200 needs just to issue them against the time a copy of
the same bytes takes. Not part of the package: issue 12's re-quantizer (target: 80% of copy bandwidth) is
bounded by both at once.

Needs Triton 3.6 (the GPU image's; its ptxas and cuobjdump do the work, no GPU needed). Counts the main body,
up to the last EXIT: the out-of-line subroutines after it (div.rn's slow path) run only for operands out of
range. One program's threads run that body once (no loops), so the count is also the dynamic one; the Gluon
re-quantizer (`gluon_requant`) is counted the same way.

    PYTHONPATH=$PWD python scripts/sass_per_element.py [--m 8192 --c 4096 --copy-gbps 4230 --clock-ghz 1.98]
"""

import argparse
import os
import re
import subprocess
import tempfile
from dataclasses import replace

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.experimental.gluon._runtime import GluonASTSource

from precision_engine.bench.quant import GLUON_REQUANT_SWEEP
from precision_engine.numerics import triton_quant as T
from precision_engine.numerics.formats import PRESET_FORMATS, ScaleKind

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
SMS, SCHEDULERS = 132, 4  # H200: warp instructions issued per cycle = SMs x schedulers
GROUP = 128


def sass_and_registers(source, options: dict) -> tuple[list[tuple[int, str, str]], int]:
    """(address, opcode, operands) of each instruction of `source` compiled for sm_90a, and its registers a
    thread."""
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        with open(ptx, "w") as f:
            f.write(kernel.asm["ptx"])
        report = subprocess.run([os.path.join(BIN, "ptxas"), "-v", "-arch=sm_90a", ptx, "-o", cubin],
                                capture_output=True, text=True, check=True).stderr
        sass = subprocess.run([os.path.join(BIN, "cuobjdump"), "-sass", cubin],
                              capture_output=True, text=True, check=True).stdout
    lines = re.findall(r"^\s+/\*([0-9a-f]{4,5})\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)\S*\s*([^;]*)", sass, re.M)
    return [(int(a, 16), op, rest) for a, op, rest in lines], int(re.search(r"Used (\d+) registers", report).group(1))


def main_body(instructions) -> list[str]:
    """The opcodes up to the last EXIT, NOPs aside."""
    ops = [op for _, op, _ in instructions]
    return [op for op in ops[:len(ops) - ops[::-1].index("EXIT")] if op != "NOP"]


def fmt_args(preset: str, pow2: bool) -> dict:
    """A preset format's kernel constants, with fp32 or power-of-two scales."""
    scale = ScaleKind.POW2 if pow2 else ScaleKind.FP32
    return T._fmt_args(replace(PRESET_FORMATS[preset], scale=scale), False)


def kernel_sass(fn, constexprs: dict, pointers: dict, options: dict, source_type=ASTSource,
                unaligned: tuple[str, ...] = ()) -> tuple[list[tuple[int, str, str]], int]:
    """`sass_and_registers` of kernel `fn` (Triton; Gluon with `GluonASTSource`): `constexprs` as launched,
    `pointers` the types of its pointers, the rest i32, all multiples of 16 (as the launcher specializes them) but
    `unaligned`."""
    signature = {n: "constexpr" if n in constexprs else pointers.get(n, "i32") for n in fn.arg_names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names)
             if signature[n] != "constexpr" and n not in unaligned}
    source = source_type(fn=fn, signature=signature, attrs=attrs,
                         constexprs={(fn.arg_names.index(k),): v for k, v in constexprs.items()})
    return sass_and_registers(source, options)


def kernel_counts(fn, constexprs: dict, pointers: dict, options: dict, elements: float,
                  source_type=ASTSource, unaligned: tuple[str, ...] = ()) -> tuple[int, int, float]:
    """(registers, SASS a thread, SASS an element) of `kernel_sass(fn, ...)` whose program's threads run its body
    once over `elements` values each."""
    instructions, registers = kernel_sass(fn, constexprs, pointers, options, source_type, unaligned)
    body = main_body(instructions)
    return registers, len(body), len(body) / elements


def tokens_kernel(config: dict, dequant: bool, pow2: bool, block_scale: bool = False) -> tuple[int, int, float]:
    """`kernel_counts` of `_tokens_t_kernel` on whole 128-token groups: the re-quantizer (FP8 input, `dequant`)
    or the BF16 tokens quantizer, fp32 or power-of-two scales; `block_scale`: one scale a 128x128 tile (the blocks
    re-quantizer)."""
    config = dict(config)
    warps = config.pop("num_warps")
    constexprs = dict(G=GROUP, G_IN=GROUP if dequant else 1, PACK=4, BLOCK_SUB=GROUP // 4, DEQUANT=dequant,
                      BLOCK_SCALE=block_scale, EVEN_M=True, EVEN_C=True, IEEE_DIV=False, HW_PACK=True,
                      **fmt_args("fp8_group_tokens", pow2), **config)
    pointers = {"x_ptr": "*fp8e4nv" if dequant else "*bf16", "s_in_ptr": "*fp32", "q_ptr": "*fp8e4nv",
                "s_ptr": "*fp32"}
    options = {"num_warps": warps, **({"enable_fp_fusion": False} if dequant else {})}  # as `_launch_tokens_t`
    return kernel_counts(T._tokens_t_kernel, constexprs, pointers, options,
                         GROUP * config["BLOCK_C"] * config["CHUNKS"] / (32 * warps))


def rows_kernel(pow2: bool) -> tuple[int, int, float]:
    """`kernel_counts` of the 1x128 rows quantizer (`_rows_kernel`, BF16 in) in its shipped config."""
    config = dict(T._ROWS_CONFIG)
    warps = config.pop("num_warps")
    constexprs = dict(G=GROUP, BLOCK_G=GROUP, **fmt_args("fp8_group_act", pow2), **config)
    return kernel_counts(T._rows_kernel, constexprs, {"x_ptr": "*bf16", "q_ptr": "*fp8e4nv", "s_ptr": "*fp32"},
                         {"num_warps": warps}, config["BLOCK_M"] * GROUP * config["GROUPS"] / (32 * warps))


def blocks_kernel(pow2: bool) -> tuple[int, int, float]:
    """`kernel_counts` of the weight quantizer (`_blocks_kernel`, BF16 in) on a whole 128x128 block, writing
    Q(W) and Q(W)^T as training does."""
    warps = T._BLOCKS_CONFIG["num_warps"]
    constexprs = dict(BR=GROUP, BC=GROUP, BLOCK_R=GROUP, BLOCK_C=GROUP, TRANSPOSED=True, PACK=4,
                      BLOCK_SUB=GROUP // 4, HW_PACK=True, **fmt_args("fp8_block_weight", pow2))
    pointers = {"w_ptr": "*bf16", "q_ptr": "*fp8e4nv", "s_ptr": "*fp32", "qt_ptr": "*fp8e4nv", "st_ptr": "*fp32"}
    return kernel_counts(T._blocks_kernel, constexprs, pointers, {"num_warps": warps}, GROUP * GROUP / (32 * warps))


GLUON_REQUANT_POINTERS = {"x_ptr": "*fp8e4nv", "s_in_ptr": "*fp32", "q_ptr": "*fp8e4nv", "s_ptr": "*fp32"}


def gluon_requant_constexprs(args: dict, warps: int, token_lanes: int, even: bool = True,
                             stride: int = 4096, block_scale: bool = False) -> dict:
    """The Gluon re-quantizer's constexprs as `gluon_requant` launches it: the output format's constants `args`
    (`triton_quant._fmt_args`), its program shape, whole tiles or not (`even`), the input's row stride and whether
    it writes 128x128 blocks (`block_scale`)."""
    return {n: args[n] for n in ("FMAX", "RFMAX", "MBITS", "EMIN", "POW2")} | {
        "STRIDE": stride, "G_IN": GROUP, "WARPS": warps, "TOKEN_LANES": token_lanes, "EVEN_M": even, "EVEN_C": even,
        "BLOCK_SCALE": block_scale}


def gluon_requant(pow2: bool, warps: int, token_lanes: int, block_scale: bool = False, ring: bool = False,
                  even: bool = True, unaligned: tuple[str, ...] = ()) -> tuple[int, int, float]:
    """(registers, SASS a thread, SASS an element) of the Gluon re-quantizer (`gluon_requant`) on 128-token groups
    of an 8B activation's 4096 columns, fp32 or power-of-two scales; `block_scale`: into 128x128 blocks; `ring`:
    the persistent ring program (SASS a tile's element), with `unaligned` arguments not multiples of 16 (e.g. the
    input scales' column stride at 8155 tokens); `even`: whole tiles."""
    from precision_engine.numerics import gluon_requant as R
    from precision_engine.numerics import gluon_tokens

    constexprs = gluon_requant_constexprs(fmt_args("fp8_group_tokens", pow2), warps, token_lanes, even,
                                          block_scale=block_scale) | ({"STAGES": R.RING_STAGES} if ring else {})
    return kernel_counts(R._ring_kernel if ring else R._requant_kernel, constexprs, GLUON_REQUANT_POINTERS,
                         {"num_warps": warps, "enable_fp_fusion": False},
                         GROUP * gluon_tokens.block_columns(warps, token_lanes) / (32 * warps), GluonASTSource,
                         unaligned)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--m", type=int, default=8192, help="tokens")
    parser.add_argument("--c", type=int, default=4096, help="columns")
    parser.add_argument("--copy-gbps", type=float, default=4230.0, help="a device copy's GB/s, measured")
    parser.add_argument("--clock-ghz", type=float, default=1.98, help="the SM clock while it runs")
    args = parser.parse_args()
    elements = args.m * args.c
    print(f"{args.m}x{args.c}: {SMS} SMs x {SCHEDULERS} warp instructions a cycle at {args.clock_ghz} GHz; "
          f"copy at {args.copy_gbps:.0f} GB/s")
    print("kernel | config | scales | registers | SASS/thread | SASS/element | issue us | copy us | issue/copy")
    tokens = [("re-quantizer", "shipped (32 cols, 2 warps)", T._REQUANT_CONFIG, True),
              ("re-quantizer", "64 cols, 4 warps", T._TOKENS_CONFIG, True),
              ("tokens, bf16", "shipped (64 cols, 4 warps)", T._TOKENS_CONFIG, False)]
    for pow2 in (False, True):  # bytes an element: read plus written, scales aside
        counts = [(name, label, 2 if dequant else 3, tokens_kernel(config, dequant, pow2))
                  for name, label, config, dequant in tokens]
        counts += [("blocks re-quantizer", "shipped (128 cols, 2 warps)", 2,
                    tokens_kernel({**T._REQUANT_BLOCKS_CONFIG, "BLOCK_C": GROUP, "CHUNKS": 1}, True, pow2, True)),
                   ("rows 1x128, bf16", "shipped (64 rows, 8 warps)", 3, rows_kernel(pow2)),
                   ("weight + ^T, bf16", "shipped (128x128, 8 warps)", 4, blocks_kernel(pow2))]
        counts += [("re-quantizer", f"Gluon, {warps} warps, {lanes} token lanes", 2,
                    gluon_requant(pow2, warps, lanes)) for warps, lanes in GLUON_REQUANT_SWEEP]
        counts += [("blocks re-quantizer", f"Gluon, 8 warps, {lanes} token lanes", 2,
                    gluon_requant(pow2, 8, lanes, block_scale=True)) for lanes in (8, 4)]
        for name, label, nbytes, (registers, per_thread, per_element) in counts:
            copy_us = elements * nbytes / (args.copy_gbps * 1e3)
            issue_us = elements * per_element / 32 / (SMS * SCHEDULERS * args.clock_ghz * 1e3)
            print(f"{name} | {label} | {'pow2' if pow2 else 'fp32'} | {registers} | {per_thread} | "
                  f"{per_element:.2f} | {issue_us:.1f} | {copy_us:.1f} | {issue_us / copy_us:.2f}")

if __name__ == "__main__":
    main()
