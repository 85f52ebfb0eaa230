"""Module rewrites: apply one phase of a compiled plan to a live model, undo it, and invalidate its FP8 weight
caches after an optimizer step; the FP8 KV cache for transformers models (`kv_cache`)."""

from precision_engine.rewrite.apply import (RewriteReport, applied_kv_cache, apply, invalidate_weight_caches, restore,
                                            swap_modules)
from precision_engine.rewrite.experts import Fp8Experts

__all__ = ["Fp8Experts", "RewriteReport", "applied_kv_cache", "apply", "invalidate_weight_caches", "restore",
           "swap_modules"]
