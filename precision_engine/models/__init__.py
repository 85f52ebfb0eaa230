"""Models the compiler plans for: built-in architecture configs, meta-device builds and their inventories.

Importing this package is cheap; torch and transformers load only when a model is built.
"""

from precision_engine.models.inventory import ModelInventory, ModuleInfo, ModuleInventory, ModuleKind
from precision_engine.models.loader import build_model, load_inventory, resolve_config
from precision_engine.models.registry import BUILTIN_MODELS

__all__ = [
    "BUILTIN_MODELS",
    "ModelInventory",
    "ModuleInfo",
    "ModuleInventory",
    "ModuleKind",
    "build_model",
    "load_inventory",
    "resolve_config",
]
