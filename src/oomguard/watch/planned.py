"""The one door from watch to the planner: what a deployment's `vllm serve` command should get at startup.

`watch` reads the KV pool from the server itself (`cache_config_info`) first; a plan adds what the server
does not say: how many blocks it *should* have had. A server that came up with clearly fewer blocks than
planned lost memory to something the plan did not count (another process on the GPU, a larger activation
peak, a different version's accounting), and runs with less headroom than its owners think.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class PlannedCapacity:
    command: str
    num_gpu_blocks: int
    block_size: int
    budget_bytes: int  # gpu_memory_utilization x device total, for rank 0
    device_total_bytes: int
    gpu_name: str


def planned_capacity(command: str, gpu: str | None = None) -> PlannedCapacity:
    """Plan `vllm serve ...` (a shell-quoted string) on `gpu`; planner errors reach the user as one line."""
    from oomguard.planning import PlanRequest, plan  # deferred: the planner is only needed with --plan

    argv = shlex.split(command)
    result = plan(PlanRequest.from_argv(argv, gpu=gpu))
    return PlannedCapacity(
        command,
        result.kv.num_gpu_blocks,
        result.kv.block_size,
        result.ranks[0].budget_bytes,
        result.gpu.total_bytes,
        result.gpu.name,
    )
