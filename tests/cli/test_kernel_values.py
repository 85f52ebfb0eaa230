"""Whatever `validate --model` accepts, `check` and `export` run: over the kernel-related values the schema
allows (kernel, batch invariance, every operand's dtype / granularity / group / block / axis / scale, compute),
each is either refused by `validate --model` with a file:line:col location, or `check` and `export` run it.

A kernel this device cannot run (the kernel table's `requires`, e.g. cuBLAS on a CPU) is a property of the
machine, not of the policy: `check` then refuses with that requirement (exit 2), and `export`, which runs no
GEMM, still writes the checkpoint. Each case takes about 3-6 s on 2 CPU cores (three CLI runs on tiny-llama).
"""

import re

import pytest
from typer.testing import CliRunner

from precision_engine.cli.app import app
from precision_engine.numerics.capabilities import KERNELS
from precision_engine.numerics.formats import Kernel

runner = CliRunner()
W8, A8, T8 = "formats.w8", "formats.a8", "formats.t8"


def fmt(dtype="float8_e4m3", **body):
    items = ", ".join(f"{k}: {v}" for k, v in {"dtype": dtype, **body}.items())
    return "{" + items + "}"


VALUES = {
    # the policy-wide kernel (with batch invariance off for the batch-variant ones, which validate refuses else)
    **{f"kernel={k.value}": [f"kernel={k.value}"] for k in Kernel},
    **{f"kernel={k.value},variant": [f"kernel={k.value}", "numerics.batch_invariant=false"] for k in Kernel},
    "weight e5m2": [f"{W8}={fmt('float8_e5m2', granularity='block', block='[128, 128]')}"],
    "weight pow2": [f"{W8}={fmt(granularity='block', block='[128, 128]', scale='pow2')}"],
    "weight 128x256": [f"{W8}={fmt(granularity='block', block='[128, 256]')}"],
    "weight 64x64": [f"{W8}={fmt(granularity='block', block='[64, 64]')}"],
    "weight tensor": [f"{W8}={fmt(granularity='tensor')}", f"{W8}.block=null"],  # --set merges: drop block
    "weight channel": [f"{W8}={fmt(granularity='channel')}", f"{W8}.block=null"],
    "weight bf16": [f"{W8}={fmt('bf16')}"],
    "input 1x64": [f"{A8}={fmt(granularity='group', group=64)}"],
    "input 1x256": [f"{A8}={fmt(granularity='group', group=256)}"],
    "input channel": [f"{A8}={fmt(granularity='channel')}", f"{A8}.group=null"],
    "input tensor": [f"{A8}={fmt(granularity='tensor')}", f"{A8}.group=null"],
    "input e5m2 pow2": [f"{A8}={fmt('float8_e5m2', granularity='group', group=128, scale='pow2')}"],
    "input tokens": [f"{A8}={fmt(granularity='group', group=128, axis='tokens')}"],
    "wgrad 64x1": [f"{T8}={fmt(granularity='group', group=64, axis='tokens')}"],
    "wgrad along k": [f"{T8}={fmt(granularity='group', group=128)}"],
    "no backward fp8": ["rules.unified[1].linear.grad_output=null", "rules.unified[1].linear.wgrad_operands=null"],
    **{f"compute {c}": [f"rules.unified[1].compute={c}"] for c in ("bf16", "fp16", "fp32")},
}
# a file:line:col, or the --set that introduced the value
LOCATION = re.compile(r"(?m)^(\S+\.yaml:\d+:\d+|--set .+?): error: ")


def invoke(*args):
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output, result.output
    return result


@pytest.mark.slow
@pytest.mark.parametrize("overrides", VALUES.values(), ids=VALUES.keys())
def test_validate_refuses_with_a_location_or_check_and_export_run(overrides, tmp_path):
    sets = [arg for value in overrides for arg in ("--set", value)]
    validated = invoke("validate", "jetrl_unified", "--model", "tiny-llama", *sets)
    if validated.exit_code == 1:
        assert LOCATION.search(validated.output), validated.output
        return
    assert validated.exit_code == 0, validated.output
    exported = invoke("export", "-p", "jetrl_unified", "-m", "tiny-llama", "-o", str(tmp_path / "out"), *sets)
    assert exported.exit_code == 0, exported.output
    checked = invoke("check", "-p", "jetrl_unified", "-m", "tiny-llama", "--seq-len", "6", "--batch", "1",
                     "--no-decode", "--no-layers", *sets)
    kernel = next((Kernel(v.split("=")[1]) for v in overrides if v.startswith("kernel=")), Kernel.AUTO)
    if kernel in (Kernel.CUBLAS, Kernel.CUBLAS_PINNED, Kernel.DEEP_GEMM):  # the table says this CPU cannot run them
        assert checked.exit_code == 2 and KERNELS[kernel].requires in checked.output, checked.output
    else:
        assert checked.exit_code == 0, checked.output
