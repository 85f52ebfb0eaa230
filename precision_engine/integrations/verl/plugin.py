"""The `verl.plugins` entry point: verl imports this module at `import verl`, in every process.

Importing it registers `PrecisionFSDPEngine` with verl's EngineRegistry. verl logs a plugin that fails to load
at DEBUG only, so a failure is logged here at ERROR, with the traceback, before verl swallows it: a run that
asked for a policy would otherwise train with verl's own engine and plain BF16 numerics.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

try:
    from precision_engine.integrations.verl.engine import PrecisionFSDPEngine  # noqa: F401 (registers it)
except Exception:
    logger.exception("precision-engine: the verl plugin failed to load; verl runs with its own FSDP engine")
    raise
