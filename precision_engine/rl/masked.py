"""Masked reductions over response tokens, defined exactly as verl's `verl.utils.torch_functional` defines them.

The correction, the mismatch metrics and the losses all reduce through these two functions so that their numbers
equal verl 0.9.1's bit for bit on the same tensors: the same ops in the same order, including the `+ 1e-8` in
the mean's denominator (a fully masked row has mean 0, not NaN) and the `where` that keeps a NaN or Inf in a
padded position from leaking into a sum.
"""

from __future__ import annotations

import torch


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of `values` where `mask` is set (bool or 0/1 numbers); everything else counts as zero."""
    kept = torch.where(mask.bool(), values, 0.0)
    return (kept * mask).sum() if dim is None else (kept * mask).sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of `values` where `mask` is set; 0 for a row with no set entry (the denominator carries + 1e-8)."""
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return masked_sum(values, mask, dim) / (count + 1e-8)
