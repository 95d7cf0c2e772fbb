"""What to plan, for any engine: the neutral request that `planning` dispatches and each engine reads.

The engine's own settings arrive as its launch command (`direct_args` given to oomguard, then `command`, the
command as the user runs it) and as `flags` in the engine's own names; the engine merges them in that order,
later ones winning. It lives beside `result.py`, outside `planning/`, so that engines can read it without
importing the package that dispatches to them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

from oomguard.api_fields import (
    as_usage,
    check_byte_size,
    check_command_type,
    check_count,
    check_flags,
    check_measured,
    check_text,
)
from oomguard.host.ledger import HostLimits
from oomguard.kinds import Usage

if TYPE_CHECKING:  # Self is typing's from Python 3.11; annotations are not evaluated at run time
    from typing_extensions import Self


class ChangesFlags:
    """`with_flags` of the frozen request dataclasses that carry settings under the engine's names as `flags`
    (this neutral Request, vLLM's PlanRequest, SGLang's SglangRequest)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]
    flags: Mapping[str, Any]

    def with_flags(self, **changes: Any) -> Self:
        return replace(self, flags={**self.flags, **changes})


@dataclass(frozen=True)
class Request(ChangesFlags):
    """One deployment to plan. `engine` None: read from the command (vLLM unless it is SGLang's)."""

    command: Sequence[str] | str | None = None
    model: str | None = None
    engine: str | None = None
    flags: Mapping[str, Any] = field(default_factory=dict)
    direct_args: Sequence[str] = ()
    gpu: str | None = None
    gpu_memory: int | str | None = None
    engine_version: str | None = None  # None: the newest the engine's table knows
    replicas_per_gpu: int = 1
    usage: Usage = Usage.SERVE
    measured: Mapping[str, int] = field(default_factory=dict)  # calibrated terms (bytes) from an earlier log
    used_by_other_processes: int = 0  # bytes in use on the GPU before the engine starts
    other_processes_source: str = "--other-processes: given by the user"
    safety_bytes: int | None = None  # the margin a fit must keep (default: the summed estimate bands)
    host: HostLimits | None = None  # the node's memory limit and /dev/shm size, when known
    local_gpus: int | None = None  # GPUs on the planned node (all of one engine's, when None)

    def __post_init__(self) -> None:
        # checked on arrival: the API's callers get a ConfigError naming the field, not a TypeError later
        if self.command is not None:
            check_command_type(self.command)
        check_text(self.model, "model")
        check_text(self.engine, "engine")
        check_text(self.gpu, "gpu")
        check_text(self.engine_version, "version")
        check_flags(self.flags)
        check_byte_size(self.gpu_memory, "gpu_memory", text_allowed=True)
        check_count(self.replicas_per_gpu, "replicas_per_gpu")
        check_count(self.local_gpus, "node_gpus", optional=True)
        check_measured(self.measured)
        check_byte_size(self.used_by_other_processes, "used_by_other_processes", text_allowed=False)
        object.__setattr__(self, "usage", as_usage(self.usage))
