"""The one adapter between diagnose and the planner (`oomguard.planning`, `oomguard.simulation.model_facts`).

The recovered setup (model, GPU total, vLLM version, TP/PP/DP/EP and every flag the planner knows, the
environment, what other processes held) is re-planned to say where the memory went (weights / activation /
non-torch / graphs / comm buffers / KV per rank) and to verify candidate fixes. Terms the engine logged
(weights, activation, non-torch, CUDA-graph estimate) replace the planner's estimates, so the plan
reproduces the failure it is asked to fix; a fix that changes what a term depends on re-plans that term.
The Hub is never contacted from here (a diagnosis must be fast and offline): models resolve from a local
directory or the bundled catalog, or not at all, and then the fixes come from the evidence's own numbers.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from oomguard.diagnosis.setup import EngineSetup
from oomguard.simulation.step_memory import ActivationModel
from oomguard.units import GiB as _GIB

if TYPE_CHECKING:
    from oomguard.result import PlanResult

# A measured term no longer holds when a fix changes one of these flags (what vLLM sizes the term from).
TERM_DEPENDS_ON = {
    "weights": {
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "quantization",
        "dtype",
        "enable_expert_parallel",
        "data_parallel_size",
    },
    "activation": {
        "max_num_batched_tokens",
        "max_num_seqs",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "dtype",
        "enable_chunked_prefill",
        "max_model_len",
    },
    "non_torch": {"tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"},
    "cuda_graph": {
        "max_num_seqs",
        "enforce_eager",
        "max_cudagraph_capture_size",
        "tensor_parallel_size",
        "compilation_config",
    },
}
_NONE = ("None", "none", "null", "")
# The planner is an aid to the diagnosis, not a condition for it: whatever it raises on a recovered setup
# (an unknown model, an odd flag value, or a defect of its own) costs the ledger and the re-planned fixes,
# never the diagnosis built from the evidence.
PLANNER_FAILURES: tuple[type[BaseException], ...] = (Exception,)


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
    measured: tuple[str, ...] = ()  # the terms taken from the engine's own log lines
    derived: tuple[str, ...] = ()  # the terms set so the plan reproduces the logged KV memory

    def lines(self) -> list[tuple[str, float, str]]:
        """(item, GiB, source) for the report's 'where the memory went'."""

        def src(term: str) -> str:
            return (
                "logged"
                if term in self.measured
                else "from the logged KV"
                if term in self.derived
                else "planner"
            )

        return [
            ("budget (total x utilization)", self.budget, "planner"),
            ("weights", self.weights, src("weights")),
            ("activation peak", self.activation, src("activation")),
            ("non-torch", self.non_torch, src("non_torch")),
            ("CUDA graphs", self.cuda_graphs, src("cuda_graph")),
            ("comm buffers", self.comm_buffers, "planner"),
            ("KV cache", self.kv_cache, "planner"),
        ]


@dataclass(frozen=True)
class PlannedFix:
    flags: dict[str, Any]
    summary: str
    ledger: Ledger


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


def _planner_flags(setup: EngineSetup) -> tuple[dict[str, Any], dict[str, str]]:
    """The recovered flags the planner's flag table knows and can parse (one odd value must not cost the
    plan), and the environment variables."""
    from oomguard.engines.vllm.flags import args_from_mapping

    flags: dict[str, Any] = {}
    env: dict[str, str] = {}
    for key, value in setup.flags.items():
        if key.isupper():
            env[key] = value
            continue
        if key == "model" or value in _NONE:
            continue
        try:
            parsed = args_from_mapping({key: value}, where="")
        except PLANNER_FAILURES:
            continue
        if parsed.values:
            flags[key] = value
    return flags, env


def planner_model(model: str) -> str:
    """The model as the planner can resolve it offline: a local directory that exists as given, else a
    checkpoint path of another machine ('/data/models/Qwen/Qwen3-8B/') by its trailing 'org/name' or 'name'
    when the bundled catalog knows it."""
    from oomguard.models.resolve import load_catalog

    if os.path.isdir(model) or "/" not in model.strip("/") or not model.startswith(("/", ".", "~")):
        return model
    parts = [p for p in model.replace("\\", "/").split("/") if p and p not in (".", "..", "~")]
    catalog = load_catalog()
    for candidate in ("/".join(parts[-2:]), parts[-1] if parts else ""):
        if candidate and candidate.lower() in catalog:
            return candidate
    return model


def plan_request(setup: EngineSetup, changes: dict[str, Any] | None = None) -> Any:
    """The PlanRequest the recovered setup becomes (with `changes` to its flags)."""
    changes = changes or {}
    from oomguard.engines.vllm.flags import ServeArgs
    from oomguard.planning import PlanRequest

    flags, env = _planner_flags(setup)
    model = planner_model(setup.model) if setup.model else None
    stale = {term for term, deps in TERM_DEPENDS_ON.items() if deps & changes.keys()}
    kwargs: dict[str, Any] = {
        "model": model,
        "flags": {**flags, **changes},
        "args": ServeArgs(model, {}, env),
        "measured": {k: v for k, v in setup.measured.items() if k not in stale},
        "used_by_other_processes": setup.other_processes_bytes,
    }
    if setup.gpu_total_bytes:
        kwargs["gpu_memory"] = int(setup.gpu_total_bytes)
    if setup.gpu_name:
        kwargs["gpu"] = setup.gpu_name
    if setup.version and setup.version[:1].isdigit():
        kwargs["vllm_version"] = setup.version.split("+")[0]
    return PlanRequest(**kwargs)


def _ledger(result: PlanResult, planned_measured: Collection[str], logged: dict[str, int]) -> Ledger:
    """The ledger of a neutral plan result; `planned_measured`: the terms the plan took as measured."""
    r = result.rank0
    setting = result.engine.setting
    measured = tuple(sorted(logged.keys() & set(planned_measured)))
    derived = tuple(sorted(set(planned_measured) - logged.keys()))
    return Ledger(
        fits=bool(result.fits),
        errors=tuple(result.errors),
        budget=r.budget_bytes / _GIB,
        weights=r.weights.bytes / _GIB,
        activation=r.activation.bytes / _GIB,
        non_torch=r.non_torch.bytes / _GIB,
        cuda_graphs=r.cuda_graphs.bytes / _GIB,
        comm_buffers=r.comm_buffers.bytes / _GIB,
        kv_cache=r.kv_cache_bytes / _GIB,
        num_gpu_blocks=int(result.kv.num_blocks),
        kv_cache_tokens=int(result.kv.tokens),
        max_model_len=int(setting("max_model_len")),
        max_num_batched_tokens=int(setting("max_num_batched_tokens")),
        max_num_seqs=int(setting("max_num_seqs")),
        gpu_memory_utilization=float(setting("gpu_memory_utilization")),
        measured=measured,
        derived=derived,
    )


def plannable(setup: EngineSetup) -> bool:
    return (
        setup.engine != "sglang"
        and bool(setup.model)
        and bool(setup.gpu_total_bytes or setup.gpu_name)
        and _offline_model(setup.model or "")
    )


def _offline_model(model: str) -> bool:
    """The planner can resolve the model offline: a local directory or config.json, or a catalog name (the
    Hub is never asked from here, so anything else would only fail, after a search for close names)."""
    from oomguard.models.resolve import HUB_PREFIXES, load_catalog

    if os.path.exists(os.path.expanduser(model)):
        return True
    name = planner_model(model).strip().lower()
    for prefix in HUB_PREFIXES:
        name = name.removeprefix(prefix)
    return name.strip("/") in load_catalog()


@dataclass(frozen=True)
class _Planned:
    """The neutral result of a recovered setup, the terms it took as measured, and vLLM's own plan (what the
    fix search re-plans)."""

    result: PlanResult
    measured: frozenset[str]
    native: Any


def _plan(setup: EngineSetup, changes: dict[str, Any]) -> _Planned | None:
    """The planner's result, or None when it cannot plan this setup (unknown model offline, odd flags)."""
    if not plannable(setup):
        return None
    try:
        from oomguard.engines.vllm.engine import PLANNER as VLLM
        from oomguard.planning import plan
        from oomguard.planning.dispatch import finish

        with _offline():
            request = plan_request(calibrated(setup), changes)
            native = plan(request)
            return _Planned(finish(VLLM, native, fixes=False), frozenset(request.measured), native)
    except PLANNER_FAILURES:
        return None


def calibrated(setup: EngineSetup) -> EngineSetup:
    """The setup with its activation term set so the plan reproduces the KV memory the engine logged.

    vLLM: available KV = budget - weights - activation peak - non-torch (- CUDA-graph estimate from v0.21).
    With the budget (total, utilization) and the weights known, the logged KV pins the rest; it is booked as
    activation (the term the planner estimates least well), unless the log gave the activation itself."""
    if setup.logged_kv_bytes is None or "activation" in setup.measured:
        return setup
    try:
        from oomguard.engines.vllm.engine import PLANNER as VLLM
        from oomguard.planning import plan
        from oomguard.planning.dispatch import finish

        with _offline():
            result = finish(VLLM, plan(plan_request(setup, {})), fixes=False)
    except PLANNER_FAILURES:
        return setup
    rank = result.rank0
    activation = int(rank.activation.bytes) + int(rank.available_kv_bytes) - setup.logged_kv_bytes
    if activation < 0:
        return setup  # the log's KV is larger than the whole budget allows: not this setup, keep the estimate
    return replace(setup, measured={**setup.measured, "activation": activation})


def plan_setup(setup: EngineSetup, **changes: Any) -> Ledger | None:
    """The planner's ledger for the recovered setup (with `changes`), or None when it cannot be planned
    (no model, unknown model offline, no GPU size, SGLang)."""
    planned = _plan(setup, changes)
    return _ledger(planned.result, planned.measured, setup.measured) if planned is not None else None


def planner_fixes(setup: EngineSetup, limit: int = 4) -> list[PlannedFix]:
    """The planner's fixes for the recovered setup, each re-planned with the measured terms it changes
    re-estimated; only those that fit are kept (empty when it cannot plan the setup)."""
    planned = _plan(setup, {})
    if planned is None:
        return []
    try:
        from oomguard.engines.vllm.engine import PLANNER as VLLM
        from oomguard.planning.fix_search import search_fixes

        with _offline():
            fixes = search_fixes(VLLM, planned.native, limit=limit)
    except PLANNER_FAILURES:
        return []
    out = []
    for f in (fix.result for fix in fixes):
        flags = {k: v for k, v in f.flags.items() if k != "replicas_per_gpu"}
        checked = _plan(setup, flags) if flags else None
        if checked is not None and checked.result.fits:
            ledger = _ledger(checked.result, checked.measured, setup.measured)
            out.append(PlannedFix(dict(f.flags), f"{f.summary} ({f.cost})", ledger))
    return out


def activation_model(setup: EngineSetup) -> ActivationModel | None:
    """What one step's activations cost per token and per sampled row on the binding rank, from the planner's
    model through the simulator's own adapter; None when the model cannot be resolved offline."""
    if not plannable(setup):
        return None
    try:
        from oomguard.simulation.model_facts import from_planner

        with _offline():
            _, facts, _ = from_planner(plan_request(setup, {}))
    except PLANNER_FAILURES:
        return None
    model: ActivationModel = facts.activation
    return model
