"""The one door from watch to the planner: what a deployment's `vllm serve` command should get at startup.

`watch` reads the KV pool from the server itself (`cache_config_info`) first; a plan adds what the server
does not say: how many blocks it *should* have had. A server that came up with clearly fewer blocks than
planned lost memory to something the plan did not count (another process on the GPU, a larger activation
peak, a different version's accounting), and runs with less headroom than its owners think.
"""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass

from oomguard.errors import OomguardError

log = logging.getLogger(__name__)
UTILIZATION_FLAG = "--gpu-memory-utilization"


@dataclass(frozen=True)
class PlannedCapacity:
    command: str
    num_gpu_blocks: int
    block_size: int
    budget_bytes: int  # gpu_memory_utilization x device total, for rank 0
    device_total_bytes: int
    gpu_name: str
    utilization_note: str = ""  # where the utilization came from when the server said it


def with_utilization(argv: list[str], utilization: float) -> list[str]:
    """`argv` with --gpu-memory-utilization set to `utilization` (any earlier value, either form, removed)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == UTILIZATION_FLAG:
            skip = True
            continue
        if arg.startswith(UTILIZATION_FLAG + "="):
            continue
        out.append(arg)
    return [*out, UTILIZATION_FLAG, f"{utilization:g}"]


def planned_capacity(
    command: str, gpu: str | None = None, utilization: float | None = None
) -> PlannedCapacity:
    """Plan `vllm serve ...` (a shell-quoted string) on `gpu`, with the server's own utilization when given;
    planner errors reach the user as one line."""
    # deferred: the planner is only needed with --plan
    from oomguard.planning.dispatch import plan_result
    from oomguard.request import Request

    try:
        argv = shlex.split(command)
    except ValueError as err:
        raise OomguardError(f"--plan {command!r}: {err}") from None
    note = ""
    if utilization is not None:
        argv = with_utilization(argv, utilization)
        note = f"gpu_memory_utilization {utilization:g} as the server reports it (cache_config_info)"
    result = plan_result(Request(command=argv, gpu=gpu), fixes=False)
    return PlannedCapacity(
        command,
        result.kv.num_blocks,
        result.kv.block_size,
        result.ranks[0].budget_bytes,
        result.gpu.total_bytes,
        result.gpu.name,
        note,
    )


class PlanSource:
    """The plan of one command, re-planned with the utilization the server reports in cache_config_info
    (a config file or a wrapper may set it, whatever the command line says); one plan per value."""

    def __init__(self, command: str, gpu: str | None = None) -> None:
        self.command = command
        self.gpu = gpu
        self._plans: dict[float | None, PlannedCapacity] = {None: planned_capacity(command, gpu)}

    def for_reported(self, utilization: float | None) -> PlannedCapacity:
        if utilization is not None and not 0 < utilization <= 1:
            utilization = None  # not a utilization vLLM would start with
        if utilization not in self._plans:
            try:
                self._plans[utilization] = planned_capacity(self.command, self.gpu, utilization)
            except OomguardError as err:
                log.warning("cannot re-plan with the reported utilization %s: %s", utilization, err)
                self._plans[utilization] = self._plans[None]
        return self._plans[utilization]
