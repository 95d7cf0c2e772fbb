"""The one adapter between diagnose and the planner (`oomguard.planning`).

The recovered setup is re-planned to say where the memory went (weights / activation / non-torch / graphs /
comm buffers / KV per rank) and to verify candidate fixes. The Hub is never contacted from here (a diagnosis
must be fast and offline): models resolve from a local directory or the bundled catalog, or not at all, and
then the fixes come from the evidence's own numbers.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from oomguard.diagnose.setup import EngineSetup
from oomguard.errors import OomguardError

# vLLM fields the planner understands; other recovered flags are kept for the report only.
PLANNER_FLAGS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "enable_expert_parallel",
                 "max_model_len", "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "kv_cache_dtype",
                 "quantization", "dtype", "enforce_eager", "block_size", "enable_chunked_prefill",
                 "enable_prefix_caching")
_GIB = float(1 << 30)


@dataclass(frozen=True)
class Ledger:
    """Rank 0's memory as the planner computes it, in GiB, and the verdict."""

    fits: bool
    errors: tuple[str, ...]
    budget: float
    weights: float
    activation: float
    non_torch: float
    cuda_graphs: float
    comm_buffers: float
    kv_cache: float
    num_gpu_blocks: int
    kv_cache_tokens: int
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    gpu_memory_utilization: float

    def lines(self) -> list[tuple[str, float]]:
        return [("weights", self.weights), ("activation peak", self.activation), ("non-torch", self.non_torch),
                ("CUDA graphs", self.cuda_graphs), ("comm buffers", self.comm_buffers), ("KV cache", self.kv_cache)]


@dataclass(frozen=True)
class PlannedFix:
    flags: dict[str, Any]
    summary: str
    ledger: Ledger | None


@contextmanager
def _offline() -> Iterator[None]:
    before = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = before


def _request(setup: EngineSetup, changes: dict[str, Any]) -> Any:
    from oomguard.planning import PlanRequest

    flags: dict[str, Any] = {k: setup.flags[k] for k in PLANNER_FLAGS if k in setup.flags}
    flags.update(changes)
    kwargs: dict[str, Any] = {"model": setup.model, "flags": flags}
    if setup.gpu_total_bytes:
        kwargs["gpu_memory"] = int(setup.gpu_total_bytes)
    elif setup.gpu_name:
        kwargs["gpu"] = setup.gpu_name
    if setup.version and setup.version[:1].isdigit():
        kwargs["vllm_version"] = setup.version.split("+")[0]
    return PlanRequest(**kwargs)


def _ledger(result: Any) -> Ledger:
    r = result.rank0
    cfg = result.engine
    return Ledger(
        fits=bool(result.fits), errors=tuple(result.errors), budget=r.budget_bytes / _GIB,
        weights=r.weights.bytes / _GIB, activation=r.activation.bytes / _GIB, non_torch=r.non_torch.bytes / _GIB,
        cuda_graphs=r.cuda_graphs.bytes / _GIB, comm_buffers=r.comm_buffers.bytes / _GIB,
        kv_cache=r.kv_cache_bytes / _GIB, num_gpu_blocks=int(result.kv.num_gpu_blocks),
        kv_cache_tokens=int(result.kv.kv_cache_tokens), max_model_len=int(cfg.max_model_len),
        max_num_batched_tokens=int(cfg.max_num_batched_tokens), max_num_seqs=int(cfg.max_num_seqs),
        gpu_memory_utilization=float(cfg.gpu_memory_utilization),
    )


def plan_setup(setup: EngineSetup, **changes: Any) -> Ledger | None:
    """The planner's ledger for the recovered setup (with `changes`), or None when it cannot be planned
    (no model, unknown model offline, no GPU size, SGLang)."""
    if setup.engine == "sglang" or not setup.model or not (setup.gpu_total_bytes or setup.gpu_name):
        return None
    try:
        from oomguard.planning import plan
    except ImportError:
        return None
    try:
        with _offline():
            return _ledger(plan(_request(setup, changes)))
    except (OomguardError, ValueError, KeyError, ArithmeticError):
        return None


def planner_fixes(setup: EngineSetup, limit: int = 4) -> list[PlannedFix]:
    """The planner's own verified fixes for the recovered setup (empty when it cannot plan it)."""
    if plan_setup(setup) is None:
        return []
    try:
        from oomguard.planning import plan
        from oomguard.planning.advise import suggest_fixes
        with _offline():
            fixes = suggest_fixes(plan(_request(setup, {})), limit=limit)
    except (ImportError, OomguardError, ValueError, KeyError, ArithmeticError):
        return []
    return [PlannedFix(dict(f.flags), f"{f.summary} ({f.cost})", _ledger(f.plan)) for f in fixes]
