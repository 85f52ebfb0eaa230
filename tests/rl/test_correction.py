"""IS correction: hand-computed TIS/MIS cases at token and sequence level, the verl mapping, and properties on
fresh random inputs (bounds, detachment, padding, row independence)."""

from __future__ import annotations

import math

import pytest
import torch

from precision_engine.errors import UnsupportedError
from precision_engine.policy.model import CorrectionSpec, ImportanceSampling, ISLevel, ISMode
from precision_engine.rl.correction import compute_correction, mask_bounds, verl_rollout_correction

TOKEN_TIS = ImportanceSampling(level=ISLevel.TOKEN, mode=ISMode.TRUNCATE, threshold=2.0)
TOKEN_MIS = ImportanceSampling(level=ISLevel.TOKEN, mode=ISMode.MASK, threshold=2.0, lower_threshold=0.5)
SEQ_TIS = ImportanceSampling(level=ISLevel.SEQUENCE, mode=ISMode.TRUNCATE, threshold=2.0)
SEQ_MIS = ImportanceSampling(level=ISLevel.SEQUENCE, mode=ISMode.MASK, threshold=2.0, lower_threshold=0.5)
ALL, IDS = [TOKEN_TIS, TOKEN_MIS, SEQ_TIS, SEQ_MIS], ["tok-tis", "tok-mis", "seq-tis", "seq-mis"]


def from_log_ratios(log_ratios, mask):
    """Logprobs whose train - rollout difference is the given log ratio (rollout fixed at -1.5)."""
    log_ratio = torch.tensor(log_ratios, dtype=torch.float64)
    rollout = torch.full_like(log_ratio, -1.5)
    return (rollout + log_ratio).float(), rollout.float(), torch.tensor(mask, dtype=torch.bool)


def close(actual, expected):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), rtol=1e-5, atol=1e-6)


def test_token_truncate_by_hand():
    # ratios 2.5, 0.6, 1, exp(25) (log r clamped to 20, then truncated), and a padded slot
    train, rollout, mask = from_log_ratios([[math.log(2.5), math.log(0.6), 0.0, 25.0, 3.0]], [[1, 1, 1, 1, 0]])
    c = compute_correction(TOKEN_TIS, train, rollout, mask)
    close(c.weights, [[2.0, 0.6, 1.0, 2.0, 0.0]])
    close(c.ratio, [[2.5, 0.6, 1.0, math.exp(20.0), 0.0]])
    assert torch.equal(c.mask, mask)


def test_token_mask_by_hand():
    train, rollout, mask = from_log_ratios([[math.log(2.5), math.log(0.6), 0.0, math.log(0.4), math.log(1.9), -25.0,
                                             0.0]], [[1, 1, 1, 1, 1, 1, 0]])
    c = compute_correction(TOKEN_MIS, train, rollout, mask)
    assert c.mask.tolist() == [[False, True, True, False, True, False, False]]
    close(c.weights, [[2.0, 0.6, 1.0, 0.4, 1.9, math.exp(-20.0), 0.0]])


def test_mask_default_lower_bound_is_reciprocal():
    spec = ImportanceSampling(level=ISLevel.TOKEN, mode=ISMode.MASK, threshold=4.0)
    assert mask_bounds(spec) == (0.25, 4.0)
    train, rollout, mask = from_log_ratios([[math.log(0.3), math.log(0.2), math.log(3.9), math.log(4.1)]],
                                           [[1, 1, 1, 1]])
    assert compute_correction(spec, train, rollout, mask).mask.tolist() == [[True, False, True, False]]


def test_sequence_truncate_by_hand():
    log_ratios = [[0.3, -0.1, 0.5],  # padded 0.5 ignored: R = e^0.2
                  [0.4, 0.6, 0.0],  # R = e, truncated to 2
                  [15.0, 10.0, 0.0],  # sum 25: clamped to 20 before exp
                  [0.7, 0.7, 0.7]]  # no response token: weight 0
    train, rollout, mask = from_log_ratios(log_ratios, [[1, 1, 0], [1, 1, 1], [1, 1, 0], [0, 0, 0]])
    c = compute_correction(SEQ_TIS, train, rollout, mask)
    r = math.exp(0.2)
    close(c.weights, [[r, r, 0.0], [2.0, 2.0, 2.0], [2.0, 2.0, 0.0], [0.0, 0.0, 0.0]])
    close(c.log_ratio, [[0.2], [1.0], [25.0], [0.0]])
    assert torch.equal(c.mask, mask)


def test_sequence_mask_by_hand():
    log_ratios = [[0.3, -0.1, 0.5], [0.4, 0.6, 0.0], [-0.5, -0.5, 9.0], [0.1, -0.1, 0.0], [0.7, 0.7, 0.7]]
    mask_rows = [[1, 1, 0], [1, 1, 1], [1, 1, 0], [1, 1, 1], [0, 0, 0]]
    train, rollout, mask = from_log_ratios(log_ratios, mask_rows)
    c = compute_correction(SEQ_MIS, train, rollout, mask)
    # R = e^0.2 kept, e^1 dropped, e^-1 dropped, e^0 kept; the empty row stays empty
    assert c.mask.tolist() == [[True, True, False], [False] * 3, [False] * 3, [True, True, True], [False] * 3]
    r = math.exp(0.2)
    close(c.weights[0], [r, r, 0.0])
    close(c.weights[3], [1.0, 1.0, 1.0])


def test_sequence_mask_sums_clamped_token_ratios():
    """The mask tests the sum of clamped token log ratios (verl's seq_sum_k1): 22 - 20.5 counts as 20 - 20."""
    train, rollout, mask = from_log_ratios([[22.0, -20.5]], [[1, 1]])
    c = compute_correction(SEQ_MIS, train, rollout, mask)
    assert c.mask.tolist() == [[True, True]]  # kept, although R = e^1.5 is outside [0.5, 2]
    close(c.ratio, [[math.exp(1.5)] * 2])  # the weight clamps the sum instead, and is truncated to 2
    close(c.weights, [[2.0, 2.0]])


def test_float_mask_keeps_its_dtype():
    train, rollout, mask = from_log_ratios([[math.log(3.0), 0.0]], [[1, 1]])
    c = compute_correction(TOKEN_MIS, train, rollout, mask.float())
    assert c.mask.dtype == torch.float32 and c.mask.tolist() == [[0.0, 1.0]]


def test_no_correction():
    train, rollout, mask = from_log_ratios([[0.5, 0.1]], [[1, 0]])
    for spec in (None, CorrectionSpec()):
        c = compute_correction(spec, train, rollout, mask)
        assert c.weights is None and c.mask is mask


def test_takes_the_policy_block():
    train, rollout, mask = from_log_ratios([[math.log(2.5)]], [[1]])
    c = compute_correction(CorrectionSpec(importance_sampling=TOKEN_TIS), train, rollout, mask)
    close(c.weights, [[2.0]])


def test_shape_mismatch_is_refused():
    with pytest.raises(ValueError, match="shapes differ"):
        compute_correction(TOKEN_TIS, torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 4, dtype=torch.bool))


@pytest.mark.parametrize("spec", ALL, ids=IDS)
def test_random_properties(spec):
    gen = torch.Generator().manual_seed(1)
    train = (-torch.rand(16, 24, generator=gen) * 5).requires_grad_()
    rollout = train.detach() + torch.randn(16, 24, generator=gen) * 0.4
    lengths = torch.randint(0, 25, (16,), generator=gen)
    mask = torch.arange(24)[None, :] < lengths[:, None]
    c = compute_correction(spec, train, rollout, mask)
    assert not c.weights.requires_grad and not c.mask.requires_grad
    assert float(c.weights.max()) <= spec.threshold
    assert torch.all(c.weights[~mask] == 0) and not torch.any(c.mask & ~mask)
    # against a float64 reference
    log_ratio = train.detach().double() - rollout.double()
    if spec.level is ISLevel.TOKEN:
        ref_ratio = log_ratio.exp()
    else:
        ref_ratio = (log_ratio * mask).sum(-1, keepdim=True).clamp(-20, 20).exp().expand_as(log_ratio)
    ref_ratio = ref_ratio * mask
    torch.testing.assert_close(c.weights.double(), ref_ratio.clamp(max=spec.threshold), rtol=1e-5, atol=1e-6)
    if spec.mode is ISMode.MASK:
        lo, hi = mask_bounds(spec)
        margin = 1e-4
        surely_in = (ref_ratio > lo * (1 + margin)) & (ref_ratio < hi * (1 - margin)) & mask
        surely_out = ((ref_ratio < lo * (1 - margin)) | (ref_ratio > hi * (1 + margin))) & mask
        assert torch.all(c.mask[surely_in]) and not torch.any(c.mask[surely_out])
        assert surely_in.any() and surely_out.any()


@pytest.mark.parametrize("spec", ALL, ids=IDS)
def test_rows_do_not_depend_on_the_batch(spec):
    """A row's weights and mask are the same bits whether it is corrected alone or in a batch of 16."""
    gen = torch.Generator().manual_seed(2)
    train = -torch.rand(16, 33, generator=gen) * 5
    rollout = train + torch.randn(16, 33, generator=gen) * 0.2
    mask = torch.arange(33)[None, :] < torch.randint(1, 34, (16,), generator=gen)[:, None]
    full = compute_correction(spec, train, rollout, mask)
    for rows in (slice(0, 1), slice(3, 8), slice(5, 16)):
        part = compute_correction(spec, train[rows], rollout[rows], mask[rows])
        assert torch.equal(part.weights, full.weights[rows]) and torch.equal(part.mask, full.mask[rows])


def test_verl_mapping():
    prefix = "algorithm.rollout_correction."
    tis = {k.removeprefix(prefix): v for k, v in verl_rollout_correction(TOKEN_TIS).items()}
    assert tis == {"rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_is_batch_normalize": False,
                   "rollout_rs": None, "rollout_rs_threshold": None, "bypass_mode": False}
    seq_mis = {k.removeprefix(prefix): v for k, v in verl_rollout_correction(SEQ_MIS).items()}
    assert seq_mis["rollout_is"] == "sequence" and seq_mis["rollout_is_threshold"] == 2.0
    assert seq_mis["rollout_rs"] == "seq_sum_k1" and seq_mis["rollout_rs_threshold"] == "0.5_2.0"
    odd = ImportanceSampling(level=ISLevel.TOKEN, mode=ISMode.MASK, threshold=3.0, lower_threshold=0.3)
    spec_string = verl_rollout_correction(odd)[prefix + "rollout_rs_threshold"]
    lower, upper = (float(part) for part in spec_string.split("_"))
    assert verl_rollout_correction(odd)[prefix + "rollout_rs"] == "token_k1"
    assert (lower, upper) == (1.0 / 3.0, 1.0 / 0.3)  # inverted: token_k1 "a_b" keeps 1/b <= r <= 1/a, exactly
    off = verl_rollout_correction(None)
    assert off[prefix + "rollout_is"] is None and off[prefix + "rollout_rs"] is None


@pytest.mark.parametrize("spec, message", [
    (ImportanceSampling(mode=ISMode.TRUNCATE, threshold=2.0, lower_threshold=0.5), "mode 'mask' only"),
    (ImportanceSampling(threshold=1.0), "threshold > 1"),
    (ImportanceSampling(threshold=float("inf")), "threshold > 1"),
    (ImportanceSampling(mode=ISMode.MASK, threshold=2.0, lower_threshold=1.5), "0 < lower_threshold < 1"),
])
def test_settings_without_exact_meaning_are_refused(spec, message):
    with pytest.raises(UnsupportedError, match=message):
        verl_rollout_correction(spec)
    with pytest.raises(UnsupportedError, match=message):
        compute_correction(spec, torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool))
