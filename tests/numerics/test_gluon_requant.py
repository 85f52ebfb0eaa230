"""The Gluon re-quantizer's launcher refuses, before any launch, programs wider than an input group (its tokens'
input scale would not be one a row), into 128x1 groups or 128x128 blocks, and the ring program on rows its
cp.async cannot copy; AUTO launches the ring in both layouts wherever cp.async can copy the rows, one tile a
program elsewhere; neither layout claims a CPU tensor. CPU: the checks come before the GPU is needed, and AUTO's
launches are recorded instead of run."""

from dataclasses import replace

import pytest
import torch

from precision_engine.errors import OperandError
from precision_engine.numerics import gluon_requant
from precision_engine.numerics import quantize as Q
from precision_engine.numerics.formats import PRESET_FORMATS


def saved(group: int = 128, columns: int = 256) -> Q.Quantized:
    x = torch.randn(256, columns, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    return Q.quantize_rows_1xG(x, replace(PRESET_FORMATS["fp8_group_act"], group=group), backend="reference")


def test_refuses_programs_wider_than_an_input_group():
    with pytest.raises(OperandError, match="128 columns must lie in one input group, got groups of 64"):
        gluon_requant.requantize_tokens_transposed(saved(64), PRESET_FORMATS["fp8_group_tokens"])


def test_blocks_refuse_programs_wider_than_an_input_group():
    with pytest.raises(OperandError, match="128 columns must lie in one input group, got groups of 64"):
        gluon_requant.requantize_blocks_transposed(saved(64), PRESET_FORMATS["fp8_block_weight"])


def test_no_cpu_operand_runs_on_it():
    assert not gluon_requant.runs(saved(), PRESET_FORMATS["fp8_group_tokens"])
    assert not gluon_requant.runs_blocks(saved(), PRESET_FORMATS["fp8_block_weight"])


@pytest.mark.parametrize("requantize, fmt", [(gluon_requant.requantize_tokens_transposed, "fp8_group_tokens"),
                                             (gluon_requant.requantize_blocks_transposed, "fp8_block_weight")])
def test_ring_refuses_rows_cp_async_cannot_copy(requantize, fmt):
    q = saved()
    ragged = Q.Quantized(q.data[:, :200], q.scale[:, :2], q.fmt)
    offset = Q.Quantized(q.data[:, 8:136], q.scale[:, :1], q.fmt)
    for operand, what in ((ragged, "got 200 columns"), (offset, "got 128 columns, row stride 256, address 0x")):
        with pytest.raises(OperandError, match=f"16-byte runs from 16-byte boundaries: {what}"):
            requantize(operand, PRESET_FORMATS[fmt], ring=True)
    assert gluon_requant.ring_copies(q.data) and not gluon_requant.ring_copies(offset.data)


@pytest.mark.parametrize("requantize, fmt", [(gluon_requant.requantize_tokens_transposed, "fp8_group_tokens"),
                                             (gluon_requant.requantize_blocks_transposed, "fp8_block_weight")])
def test_auto_runs_the_ring_wherever_cp_async_copies_the_rows(requantize, fmt, monkeypatch):
    """On any card Triton's Gluon runs on: the ring led on the H200 (behind one tile a program) and on an H100
    behind the dgrad GEMM that precedes it in a backward (module docstring)."""
    launches = []

    class Kernel:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            return lambda *args, **constexprs: launches.append((self.name, grid))

    monkeypatch.setattr(gluon_requant, "_ring_kernel", Kernel("ring"))
    monkeypatch.setattr(gluon_requant, "_requant_kernel", Kernel("tiles"))
    monkeypatch.setattr(gluon_requant, "_device", lambda index: type("Props", (), {"multi_processor_count": 132}))
    q = saved(columns=384)
    offset = Q.Quantized(q.data[:, 8:264], q.scale[:, :2], q.fmt)
    requantize(q, PRESET_FORMATS[fmt])
    requantize(offset, PRESET_FORMATS[fmt])
    assert launches == [("ring", (6,)), ("tiles", (2, 2))]  # 2 token groups x 3 column blocks; 2 x 2
