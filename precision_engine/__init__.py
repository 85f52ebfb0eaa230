"""precision-engine: one YAML policy for the numerics of FP8 RL training and rollout.

Importing the package is cheap (no torch): heavy modules load only when used.
"""

__version__ = "0.1.0"
