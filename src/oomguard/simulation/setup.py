"""The deployment a simulation runs: vLLM's flags and the model -> the KV pool (the planner's, or
--num-gpu-blocks-override over the model's groups), vLLM's scheduler settings, the activation and step-time
models. Each decision is a named phase; `simulate.cli` only turns its options into `SetupOptions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from oomguard.engines.vllm.config import DEFAULT_BLOCK_SIZE
from oomguard.errors import ConfigError, OomguardError
from oomguard.hardware import DEFAULT_GPU
from oomguard.simulation.kv_pool import KvGroupSpec
from oomguard.simulation.model_facts import ModelFacts, PoolFacts, from_planner, read_model
from oomguard.simulation.run import SimulationConfig
from oomguard.simulation.scheduler import SchedulerConfig
from oomguard.simulation.step_memory import (
    DEFAULT_TENSORS_ALIVE,
    ActivationModel,
    ModelWidths,
    StepMemoryOptions,
)
from oomguard.simulation.step_time import StepTimeModel

if TYPE_CHECKING:
    from oomguard.engines.vllm.config import EngineConfig
    from oomguard.engines.vllm.flags import ServeArgs
    from oomguard.planning import Plan

# vLLM's fallbacks when nothing else sets them (SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS / _SEQS)
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
DEFAULT_MAX_NUM_SEQS = 128
# A model's widths when only some are given as flags and no model is known.
DEFAULT_DTYPE_BYTES = 2.0


@dataclass(frozen=True)
class SetupOptions:
    """What the simulation is asked besides vLLM's flags: the GPU, the simulator's own knobs, and model widths
    given as numbers (over the model's, or instead of one)."""

    gpu: str | None = None
    gpu_memory: str | None = None
    replicas_per_gpu: int = 1
    headroom_bytes: int | None = None  # None: the planner's headroom
    step_time_coefficients: str | None = None
    layout: str = "packed"
    tensors_alive: int = DEFAULT_TENSORS_ALIVE
    max_steps: int | None = None
    widths: dict[str, Any] = field(
        default_factory=dict
    )  # hidden_size, intermediate_size, vocab_size, dtype_bytes


@dataclass(frozen=True)
class Setup:
    config: SimulationConfig
    describe: str
    facts: dict[str, Any]
    plan: Plan | None = None  # the planner's result, when it planned the deployment


@dataclass(frozen=True)
class _Planned:
    """What the planner (or, with the override, the model's readers) says of the deployment."""

    pool: PoolFacts | None = None
    facts: ModelFacts | None = None
    read_groups: tuple[KvGroupSpec, ...] | None = None
    plan: Plan | None = None
    notes: tuple[str, ...] = ()

    @property
    def engine(self) -> EngineConfig | None:
        return self.plan.engine if self.plan is not None else None


def setup_of(serve: ServeArgs, options: SetupOptions) -> Setup:
    """The simulated deployment of `serve` (vLLM's flags, the model among them). ConfigError for a setup that
    cannot run: no model and no pool, a deployment the planner says does not start, no max_model_len."""
    values = serve.values
    override_blocks = values.get("num_gpu_blocks_override")
    planned = _plan(serve, options, override_blocks) if serve.model else _Planned()
    groups, num_blocks, source = _kv_pool(planned, override_blocks)
    sched = _scheduler(serve, planned, groups, num_blocks)
    try:
        config = SimulationConfig(
            scheduler=sched,
            activation=_activation(planned.facts, options.widths),
            memory=StepMemoryOptions(layout=options.layout, tensors_alive=options.tensors_alive),
            headroom_bytes=_headroom(planned, options),
            step_time=_step_time(serve, planned, options),
            max_steps=options.max_steps,
        )
    except ValueError as err:  # the step-memory and step-time models check their own ranges
        raise ConfigError(str(err)) from None
    engine = planned.engine
    block_size = int(
        values.get("block_size") or (engine.block_size if engine is not None else DEFAULT_BLOCK_SIZE)
    )
    return _described(serve.model, config, source, block_size, planned)


def _setting(serve: ServeArgs, planned: _Planned, name: str, default: Any) -> Any:
    """A setting as the user gave it, else as the planner resolved it, else vLLM's default."""
    if name in serve.values:
        return serve.values[name]
    engine = planned.engine
    if engine is not None and getattr(engine, name, None) is not None:
        return getattr(engine, name)
    return default


def _plan(serve: ServeArgs, options: SetupOptions, override_blocks: Any) -> _Planned:
    """The planner's pool and model facts; with --num-gpu-blocks-override, a model it cannot plan is read for
    its groups alone, and a deployment it says will not start is simulated anyway."""
    from oomguard.planning import PlanRequest

    try:
        pool, facts, plan_result = from_planner(
            PlanRequest(
                args=serve,
                gpu=options.gpu or (None if options.gpu_memory else DEFAULT_GPU),
                gpu_memory=options.gpu_memory,
                replicas_per_gpu=options.replicas_per_gpu,
            )
        )
    except OomguardError as err:
        if override_blocks is None:
            raise
        # The pool is fixed by the flag: the model and its groups from the planner's own readers.
        facts, read_groups = read_model(serve, options.gpu, options.gpu_memory)
        note = f"the planner could not plan {serve.model} ({err}); the pool is --num-gpu-blocks-override"
        return _Planned(facts=facts, read_groups=read_groups, notes=(note,))
    if not plan_result.fits and override_blocks is None:
        raise ConfigError(
            "the planner says this deployment does not start: "
            + "; ".join(plan_result.errors[:2])
            + " (see `oomguard plan`)"
        )
    return _Planned(pool, facts, None, plan_result)


def _kv_pool(planned: _Planned, override_blocks: Any) -> tuple[tuple[KvGroupSpec, ...], int, str]:
    """The KV groups, the number of blocks and where that number comes from."""
    pool = planned.pool
    if override_blocks is not None:
        if pool is None and planned.read_groups is None:
            raise ConfigError(
                "--num-gpu-blocks-override needs --model (a directory with config.json, or a known id) "
                "for the KV cache groups"
            )
        groups = pool.groups if pool is not None else planned.read_groups or ()
        num_blocks = int(override_blocks)
        return tuple(groups), num_blocks, f"--num-gpu-blocks-override {num_blocks:,}"
    if pool is not None:
        return tuple(pool.groups), pool.num_gpu_blocks, pool.source
    raise ConfigError("no KV pool: give --model (and --gpu) for the planner, or --num-gpu-blocks-override N")


def _scheduler(
    serve: ServeArgs, planned: _Planned, groups: tuple[KvGroupSpec, ...], num_blocks: int
) -> SchedulerConfig:
    """vLLM's scheduler settings: the user's flags, else the planner's resolved values, else vLLM's
    defaults; max_model_len from the model's config when neither says."""
    max_model_len = _setting(serve, planned, "max_model_len", None)
    if not isinstance(max_model_len, int):
        facts = planned.facts
        max_model_len = facts.max_position_embeddings if facts is not None else None
    if not max_model_len:
        raise ConfigError("give --max-model-len (the model's config does not say)")

    def pick(name: str, default: Any) -> Any:
        return _setting(serve, planned, name, default)

    # SchedulerConfig checks its own ranges (ValueError): here those are the user's flags.
    try:
        return SchedulerConfig(
            max_num_batched_tokens=int(pick("max_num_batched_tokens", DEFAULT_MAX_NUM_BATCHED_TOKENS)),
            max_num_seqs=int(pick("max_num_seqs", DEFAULT_MAX_NUM_SEQS)),
            max_model_len=int(max_model_len),
            num_gpu_blocks=num_blocks,
            kv_groups=groups,
            enable_prefix_caching=bool(pick("enable_prefix_caching", True)),
            long_prefill_token_threshold=int(pick("long_prefill_token_threshold", 0) or 0),
            async_scheduling=bool(pick("async_scheduling", True)),
            pipeline_parallel_size=int(pick("pipeline_parallel_size", 1)),
        )
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _activation(facts: ModelFacts | None, widths: dict[str, Any]) -> ActivationModel | None:
    """The model's activation costs (the planner's), or widths given as flags over the model's widths."""
    if not widths:
        return facts.activation if facts is not None else None
    if facts is None and "hidden_size" not in widths:
        return None
    base = facts.widths if facts is not None else ModelWidths(hidden_size=0, dtype_bytes=DEFAULT_DTYPE_BYTES)
    model = ActivationModel.from_widths(replace(base, **widths))
    where = f" over {facts.name}'s" if facts is not None else ""
    return replace(model, source=f"widths given as flags{where}")


def _headroom(planned: _Planned, options: SetupOptions) -> int | None:
    if options.headroom_bytes is not None:
        return options.headroom_bytes
    return planned.pool.headroom_bytes if planned.pool is not None else None


def _step_time(serve: ServeArgs, planned: _Planned, options: SetupOptions) -> StepTimeModel | None:
    """Given coefficients, else the GPU's roofline over the model's bytes and FLOPs per token."""
    if options.step_time_coefficients:
        return StepTimeModel.from_coefficients(options.step_time_coefficients)
    facts = planned.facts
    if facts is None:
        return None
    return StepTimeModel.from_hardware(
        options.gpu,
        facts.num_params * facts.widths.dtype_bytes,
        facts.active_params,
        facts.kv_bytes_per_token,
        facts.num_layers,
        facts.widths.hidden_size,
        int(_setting(serve, planned, "tensor_parallel_size", 1)),
    )


def _described(
    model: str | None, config: SimulationConfig, source: str, block_size: int, planned: _Planned
) -> Setup:
    """The setup with its one-line description and the facts the reports print."""
    sched = config.scheduler
    groups = sched.kv_groups
    describe = (
        f"{model or 'model from flags'}: {source}, {len(groups)} KV group(s) "
        f"({', '.join(sorted({g.kind for g in groups}))}), block {block_size}, "
        f"max_num_batched_tokens {sched.max_num_batched_tokens:,}, max_num_seqs {sched.max_num_seqs}, "
        f"max_model_len {sched.max_model_len:,}, prefix caching "
        f"{'on' if sched.enable_prefix_caching else 'off'}"
    )
    info = {
        "describe": describe,
        "model": model,
        "num_gpu_blocks": sched.num_gpu_blocks,
        "block_size": block_size,
        "kv_groups": [g.kind for g in groups],
        "max_num_batched_tokens": sched.max_num_batched_tokens,
        "max_num_seqs": sched.max_num_seqs,
        "max_model_len": sched.max_model_len,
        "enable_prefix_caching": sched.enable_prefix_caching,
        "long_prefill_token_threshold": sched.long_prefill_token_threshold,
        "async_scheduling": sched.async_scheduling,
        "layout": config.memory.layout,
        "headroom_bytes": config.headroom_bytes,
        "step_time_model": config.step_time.source if config.step_time is not None else None,
        "notes": list(planned.notes),
    }
    return Setup(config, describe, info, planned.plan)
