"""SGLang as the rollout engine: which rollout numerics it can run (`check_rollout`) and the server arguments
that serve an export with them (`server_args`, behind `precision sglang-args`)."""

from precision_engine.integrations.sglang.rollout import RolloutNumerics, check_rollout
from precision_engine.integrations.sglang.server_args import launch_command, server_args

__all__ = ["RolloutNumerics", "check_rollout", "launch_command", "server_args"]
