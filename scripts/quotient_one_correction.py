"""Why `triton_quant._quotient` stops after one FMA correction: the whole case, checked exhaustively on the CPU.

The quantizers compute q0 = RN(x * inv) with inv = RN(1 / s), then q1 = RN(q0 - RN(s * q0 - x) * inv) (two
FMAs), and cast q1 to FP8. The reference casts RN(x / s). Rounding to FP8 is monotone, so the two bytes can
differ only if q1 != RN(x / s) (adjacent fp32 values, then) and one of them is an FP8 rounding boundary. Every
boundary of E4M3 and E5M2, normal, subnormal or at saturation, is (1 + j/16) * 2**e for some j in 0..15, and
scaling x or s by a power of two scales every step exactly (no quotient near a boundary under- or overflows:
scales lie in [2**-50, 2**120]). So it is enough to take s over all 2**23 mantissas in [1, 2), b = 1 + j/16,
and every fp32 x within 4 ulps of s * b: 1.2e9 pairs. That window holds every x whose q1 or RN(x / s) can be
b: with inv and the remainder each off by at most 2**-24 relative, q1 is RN of a value within 2**-22 ulp of
x / s, so |q1 - x / s| < 1 ulp and x lies within 3 ulps of s * b.

The fp32 steps are emulated in float64, exactly: products of two fp32 values are exact there, the remainder
s * q0 - x is exact by Sterbenz's lemma and then rounded once, and the correction's sum is carried as a
two-sum so that its rounding to fp32 is a single rounding. RN(x / s) is float64 division rounded to fp32
(x / s lies at least 2**-49 relative from any fp32 midpoint, far beyond float64's error); the emulated second
correction must reproduce it, and first `--exact` random pairs beside the boundaries are redone in exact
rational arithmetic: both check the emulation.

    python scripts/quotient_one_correction.py                          # all 2**23 mantissas, ~3.5 min, 2 cores
    python scripts/quotient_one_correction.py --every 256 --uncorrected  # q0 itself: the check's teeth

Result (2026-12-05, on the CI-like machine): all 1,207,959,552 pairs, q1 != RN(x / s) on none of them, so no FP8
byte differs. Uncorrected, q0 != RN(x / s) on 1,230,074 of the 4,718,592 pairs of `--every 256`, 158,859 of
them at a boundary.
"""

import argparse
import random
import time
from fractions import Fraction

import torch

F32, F64 = torch.float32, torch.float64
GRID = 16  # FP8 boundaries' mantissas: 1 + j/16
WINDOW = 4  # ulps of x either side of s * b


def round_sum_to_fp32(hi: torch.Tensor, lo: torch.Tensor) -> torch.Tensor:
    """RN32(hi + lo), where hi = RN64(v) and lo = v - hi exactly: float64 -> fp32 rounds hi once, which is
    RN32(v) unless hi sits exactly on an fp32 midpoint (then lo says which way v lies)."""
    c = hi.to(F32)
    d = hi - c.to(F64)
    above = torch.nextafter(c, torch.full_like(c, torch.inf))
    below = torch.nextafter(c, torch.full_like(c, -torch.inf))
    tie = ((d > 0) & (2 * d == above.to(F64) - c.to(F64))) | ((d < 0) & (2 * d == below.to(F64) - c.to(F64)))
    moved = tie & (lo != 0) & (torch.sign(lo) == torch.sign(d))
    return torch.where(moved, torch.where(d > 0, above, below), c)


def correction(q: torch.Tensor, x: torch.Tensor, s: torch.Tensor, inv: torch.Tensor) -> torch.Tensor:
    """RN32(q - RN32(s*q - x) * inv), the two FMAs, for fp32 values held in float64."""
    r = (s * q - x).to(F32).to(F64)
    p = -(r * inv)
    hi = q + p
    b = hi - q
    lo = (q - (hi - b)) + (p - b)
    return round_sum_to_fp32(hi, lo).to(F64)


def rational_fp32(v: Fraction) -> Fraction:
    """v rounded to the nearest fp32 (ties to even), exactly; normal range."""
    if v == 0:
        return v
    a = abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    e -= Fraction(2) ** e > a
    m = a / Fraction(2) ** (e - 23)  # in [2**23, 2**24)
    whole, rest = divmod(m.numerator, m.denominator)
    whole += 2 * rest > m.denominator or (2 * rest == m.denominator and whole % 2 == 1)
    return (1 if v > 0 else -1) * whole * Fraction(2) ** (e - 23)


def cross_check(samples: int) -> int:
    """The emulation against exact rational arithmetic on `samples` random (s, x) pairs beside the boundaries:
    how many differ in q0 or q1."""
    rng = random.Random(5)
    n = 1 << 23
    s = torch.tensor([(rng.randrange(n) + n) / n for _ in range(samples)], dtype=F64)
    b = torch.tensor([1 + rng.randrange(GRID) / GRID for _ in range(samples)], dtype=F64)
    step = torch.tensor([rng.randint(-WINDOW, WINDOW) for _ in range(samples)], dtype=torch.int32)
    x = ((s * b).to(F32).view(torch.int32) + step).view(F32).to(F64)
    inv = (1.0 / s).to(F32).to(F64)
    q0 = (x * inv).to(F32).to(F64)
    q1 = correction(q0, x, s, inv)
    wrong = 0
    for si, xi, q0i, q1i in zip(s.tolist(), x.tolist(), q0.tolist(), q1.tolist()):
        ts, tx = Fraction(si), Fraction(xi)
        t_inv = rational_fp32(1 / ts)
        t_q0 = rational_fp32(tx * t_inv)
        t_q1 = rational_fp32(t_q0 - rational_fp32(ts * t_q0 - tx) * t_inv)
        wrong += t_q0 != Fraction(q0i) or t_q1 != Fraction(q1i)
    return wrong


def on_boundary_grid(q: torch.Tensor) -> torch.Tensor:
    """Whether each fp32 value's mantissa is 1 + j/16 (its low 19 bits zero)."""
    return (q.to(F32).view(torch.int32) & 0x7FFFF) == 0


def check(every: int, corrected: bool = True) -> tuple[int, int, int]:
    """(pairs, q1 != RN(x / s), of those with q1 or RN(x / s) on the boundary grid); q0 for q1 if not
    `corrected`."""
    n = 1 << 23
    s = (torch.arange(0, n, every, dtype=F64) + n) / n
    inv = (1.0 / s).to(F32).to(F64)
    ulp = torch.nextafter(inv.to(F32), torch.tensor(torch.inf)).to(F64) - inv
    assert bool(((1.0 - s * inv).abs() <= s * ulp / 2).all()), "inv is not RN(1 / s)"
    pairs = differ = on_grid = 0
    for j in range(GRID):
        x0 = (s * (1 + j / GRID)).to(F32).view(torch.int32)
        for step in range(-WINDOW, WINDOW + 1):
            x = (x0 + step).view(F32).to(F64)
            q0 = (x * inv).to(F32).to(F64)
            once = correction(q0, x, s, inv)
            exact = (x / s).to(F32).to(F64)
            assert torch.equal(correction(once, x, s, inv), exact), "the emulation is off"
            q1 = once if corrected else q0
            wrong = q1 != exact
            pairs += s.numel()
            differ += int(wrong.sum())
            on_grid += int((wrong & (on_boundary_grid(q1) | on_boundary_grid(exact))).sum())
    return pairs, differ, on_grid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=int, default=1, help="check every n-th scale mantissa")
    parser.add_argument("--uncorrected", action="store_true", help="check q0 = RN(x * inv) instead")
    parser.add_argument("--exact", type=int, default=2000, help="pairs to check the emulation on in rationals")
    args = parser.parse_args()
    wrong = cross_check(args.exact)
    print(f"emulation against rational arithmetic: {wrong} of {args.exact:,} pairs differ")
    if wrong:
        raise SystemExit(2)
    start = time.perf_counter()
    pairs, differ, on_grid = check(args.every, not args.uncorrected)
    name = "q0" if args.uncorrected else "q1"
    print(f"{pairs:,} pairs in {time.perf_counter() - start:.0f} s: {name} != RN(x / s) on {differ:,}, "
          f"of them at an FP8 boundary {on_grid:,}")
    if on_grid:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
