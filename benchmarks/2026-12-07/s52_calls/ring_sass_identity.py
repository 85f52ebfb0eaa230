"""Offline (Triton 3.6, no GPU): the package's ring program (`gluon_requant._ring_kernel`, tokens layout) compiles
to the same SASS, instruction by instruction, as the s49 probe's kernel the fifty-first session timed on an H200
(`requant_ring.py` at fb5fc32, the commit call 0 ran, before it launched the package kernel), at 8 warps, 8 token
lanes, 3 stages, fp32 and power-of-two scales, whole and ragged tiles. So that timing is the package kernel's.

    PYTHONPATH=$PWD /tmp/t36/bin/python benchmarks/2026-12-07/s52_calls/ring_sass_identity.py
"""

import importlib.util
import os
import subprocess
import tempfile

from triton.experimental.gluon._runtime import GluonASTSource

from precision_engine.numerics import gluon_requant as R
from scripts import sass_per_element as S

PROBE = "fb5fc32:benchmarks/2026-12-06/s49_calls/requant_ring.py"


def probe_module():
    """The probe as it was timed, loaded from git."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(subprocess.run(["git", "show", PROBE], capture_output=True, text=True, check=True).stdout)
    spec = importlib.util.spec_from_file_location("probe_ring", f.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    os.unlink(f.name)
    return module


def sass(fn, constexprs: dict):
    """(opcode, operands) of each instruction of `fn` for sm_90a, and its registers a thread."""
    instructions, registers = S.kernel_sass(fn, constexprs, S.GLUON_REQUANT_POINTERS,
                                            {"num_warps": R.WARPS, "enable_fp_fusion": False}, GluonASTSource)
    return [(op, rest) for _, op, rest in instructions], registers


def main() -> None:
    probe = probe_module()
    for pow2 in (False, True):
        for even in (True, False):
            constexprs = S.gluon_requant_constexprs(S.fmt_args("fp8_group_tokens", pow2), R.WARPS, R.TOKEN_LANES,
                                                    even) | {"STAGES": R.RING_STAGES}
            theirs, their_regs = sass(probe._ring_kernel, {k: v for k, v in constexprs.items() if k != "BLOCK_SCALE"})
            ours, our_regs = sass(R._ring_kernel, constexprs)
            print(f"pow2={pow2} even={even}: probe {their_regs} registers, {len(theirs)} SASS; package {our_regs} "
                  f"registers, {len(ours)} SASS; identical: {theirs == ours}")


if __name__ == "__main__":
    main()
