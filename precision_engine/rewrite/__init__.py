"""Module rewrites: apply one phase of a compiled plan to a live model, and undo it."""

from precision_engine.rewrite.apply import RewriteReport, apply, restore, swap_modules
from precision_engine.rewrite.experts import Fp8Experts

__all__ = ["Fp8Experts", "RewriteReport", "apply", "restore", "swap_modules"]
