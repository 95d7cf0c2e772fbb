"""What the simulator needs from the model and the planner, in one place (the adapter).

The simulator needs three things: the KV pool (blocks, block size, KV cache groups), what a step's activations
cost (`ActivationModel`, and the widths the step-time model reads), and the memory a step may use (headroom).

- `from_planner` asks `oomguard.planning.plan` for a real deployment: the pool and groups it computes, the
  activation costs from the planner's own functions (`accounting.forward_peak_bytes`, `sampler_warmup_bytes`,
  `mla_workspace_bytes`, `encoder_cache_bytes`) so that simulate and plan agree on the profile run's shape,
  and the headroom from its per-GPU ledger (what is left after every resident line, plus the activation line
  itself). With several distinct ranks (PP stages, EP ranks) the rank with the thinnest margin at the
  profile shape is the one followed.
- `read_model` reads the model and its KV groups through the same readers as the planner (`models/`,
  `engines/vllm/config.py`, `engines/vllm/kv.py`) when the pool is fixed by `--num-gpu-blocks-override` and
  the deployment itself cannot be planned; simulate never parses config.json itself, so it and `plan` agree on
  the groups (gpt-oss with `--disable-hybrid-kv-cache-manager`: one full-attention group in both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from oomguard.simulation.kv_pool import KvGroupSpec
from oomguard.simulation.step_memory import ActivationModel, ModelWidths

if TYPE_CHECKING:  # the planner is imported when first used, so `oomguard step` alone stays light
    from oomguard.engines.vllm.config import EngineConfig
    from oomguard.engines.vllm.flags import ServeArgs
    from oomguard.engines.vllm.kv import KvLayout
    from oomguard.models.spec import ModelSpec
    from oomguard.planning import Plan, PlanRequest, RankLedger


@dataclass(frozen=True)
class ModelFacts:
    name: str
    widths: ModelWidths
    activation: ActivationModel
    num_layers: int
    kv_bytes_per_token: int  # all layers, per rank, at the model dtype
    num_params: int  # total weights (for the step-time model's weight-read term)
    active_params: int  # weights one token touches (MoE: shared + k experts)
    max_position_embeddings: int


@dataclass(frozen=True)
class PoolFacts:
    """The KV pool the planner (or the user's override) gives the scheduler."""

    num_gpu_blocks: int
    groups: tuple[KvGroupSpec, ...]
    headroom_bytes: int | None  # memory a step's activations may use; None: unknown (no OOM verdicts)
    source: str


def kv_group_specs(layout: KvLayout) -> tuple[KvGroupSpec, ...]:
    """The scheduler's view of the KV groups `engines/vllm/kv.py` computes for one rank."""
    return tuple(_group(str(g.kind), g.sliding_window, int(g.block_size)) for g in layout.groups)


def _group(kind: str, window: int | None, block_size: int) -> KvGroupSpec:
    if kind == "sliding_window":
        return KvGroupSpec("sliding_window", block_size, sliding_window=window)
    if kind == "chunked_local":
        return KvGroupSpec("chunked_local", block_size, chunk_size=window)
    return KvGroupSpec("mla" if kind == "mla" else "full", block_size)


def _model_facts(
    spec: ModelSpec, engine: EngineConfig, activation: ActivationModel, kv_bytes: int
) -> ModelFacts:
    """Widths and parameter counts from the planner's `ModelSpec` (the one model reader)."""
    moe = spec.moe
    params = int(spec.num_params)
    active = params
    if moe:
        expert = 3 * spec.hidden_size * moe.expert_intermediate_size
        moe_layers = sum(1 for layer in spec.layers if getattr(layer.mlp, "kind", "") == "moe")
        active = params - moe_layers * (moe.num_experts - moe.experts_per_token) * expert
    widths = ModelWidths(
        hidden_size=int(spec.hidden_size),
        dtype_bytes=activation.dtype_bytes,
        intermediate_size=int(moe.expert_intermediate_size) if moe else int(spec.intermediate_size),
        vocab_size=int(spec.vocab_size),
        tensor_parallel_size=int(engine.tensor_parallel_size),
        num_experts=int(moe.num_experts) if moe else 0,
        experts_per_token=int(moe.experts_per_token) if moe else 0,
        expert_parallel=bool(engine.enable_expert_parallel),
        data_parallel_size=int(engine.data_parallel_size),
    )
    return ModelFacts(
        name=str(spec.name),
        widths=widths,
        activation=activation,
        num_layers=int(spec.num_hidden_layers),
        kv_bytes_per_token=kv_bytes,
        num_params=params,
        active_params=max(active, 1),
        max_position_embeddings=int(spec.max_position_embeddings),
    )


def read_model(
    serve: ServeArgs, gpu: str | None, gpu_memory: str | None
) -> tuple[ModelFacts, tuple[KvGroupSpec, ...]]:
    """The model and its KV groups without the planner's memory verdict, for a pool the user fixes
    (`--num-gpu-blocks-override`) when the deployment itself cannot be planned (a length past the model's
    limit, as the scheduler oracle's replays use). The same readers as `plan`: `models/` for the model,
    `engines/vllm/config.py` for the flags, `engines/vllm/kv.py` for the layers' specs and their groups."""
    from oomguard.engines.vllm import kv
    from oomguard.engines.vllm.config import resolve_engine_config
    from oomguard.engines.vllm.flags import ServeArgs as Args
    from oomguard.engines.vllm.parallel import distinct_ranks
    from oomguard.hardware import resolve_gpu
    from oomguard.models.resolve import resolve_model
    from oomguard.planning import PlanRequest

    assert serve.model is not None
    spec = resolve_model(serve.model, dtype=serve.get("dtype"), quantization=serve.get("quantization"))
    # The groups do not depend on the length; let a length past the model's limit through, as vLLM's env does.
    args = Args(
        serve.model, serve.values, {**serve.env, "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}, serve.unknown_flags
    )
    device = resolve_gpu(gpu, gpu_memory, [])
    engine = resolve_engine_config(
        args,
        spec,
        gpu_total_bytes=device.total_bytes,
        gpu_name=device.name,
        compute_capability=device.compute_capability,
        vllm_version=PlanRequest.vllm_version,
    )
    rank = distinct_ranks(spec, engine)[0]
    layout = kv.group_layers(kv.layer_specs(spec, engine, rank.layer_indices))
    widths_dtype = spec.dtype_bytes if engine.dtype == spec.dtype else (4 if engine.dtype == "float32" else 2)
    activation = ActivationModel.from_widths(
        ModelWidths(
            hidden_size=int(spec.hidden_size),
            dtype_bytes=float(widths_dtype),
            intermediate_size=int(spec.moe.expert_intermediate_size)
            if spec.moe
            else int(spec.intermediate_size),
            vocab_size=int(spec.vocab_size),
            num_experts=int(spec.moe.num_experts) if spec.moe else 0,
            experts_per_token=int(spec.moe.experts_per_token) if spec.moe else 0,
        )
    )
    kv_bytes = int(layout.bytes_per_block) // max(layout.min_block_size, 1) if layout.groups else 0
    return _model_facts(spec, engine, activation, kv_bytes), kv_group_specs(layout)


def from_planner(request: PlanRequest) -> tuple[PoolFacts, ModelFacts, Plan]:
    """Pool, groups, step headroom and activation costs from `oomguard.planning.plan` for a `PlanRequest`."""
    from oomguard.planning import plan

    result = plan(request)
    kv = result.kv
    rank, activation, headroom = binding_rank(result)
    facts = _model_facts(
        result.model, result.engine, activation, int(kv.bytes_per_block) // max(int(kv.block_size), 1)
    )
    where = f" ({rank.placement.label})" if len(result.ranks) > 1 else ""
    pool = PoolFacts(
        int(kv.num_gpu_blocks),
        tuple(_group(str(g.kind), g.sliding_window, int(g.block_size)) for g in kv.groups),
        headroom,
        f"oomguard plan: {result.gpu.name}{where}, {kv.num_gpu_blocks:,} blocks of {kv.block_size}",
    )
    return pool, facts, result


def activation_of_rank(result: Plan, rank: RankLedger) -> ActivationModel:
    """The planner's activation mechanism on one rank, per token and per sampled row.

    `forward_peak_bytes` is linear in the step's tokens (hidden streams and each layer's transient all scale
    with them), so its value at the profile run's `max_num_batched_tokens` gives the bytes per token; the
    sampler warm-up over `sampler_rows` rows gives the bytes per sampled row."""
    from oomguard.engines.vllm import accounting as acc

    spec, cfg, placement = result.model, result.engine, rank.placement
    tokens = max(1, int(cfg.max_num_batched_tokens))
    sampler = acc.sampler_warmup_bytes(spec, cfg) if placement.holds_lm_head else 0
    fixed = (
        acc.mla_workspace_bytes(spec, cfg, placement)
        + acc.encoder_cache_bytes(spec, cfg)
        + acc.PROFILE_RESIDUAL_BYTES
    )
    # The activation dtype, as forward_peak_bytes takes it.
    dt = spec.dtype_bytes if cfg.dtype == spec.dtype else (4 if cfg.dtype == "float32" else 2)
    return ActivationModel(
        hidden_size=int(spec.hidden_size),
        dtype_bytes=float(dt),
        forward_bytes_per_token=acc.forward_peak_bytes(spec, cfg, placement) / tokens,
        sampler_bytes_per_row=sampler / max(1, int(cfg.sampler_rows)),
        fixed_bytes=int(fixed),
        ep_gathered_ranks=int(cfg.data_parallel_size) if spec.moe and cfg.enable_expert_parallel else 0,
        source=f"planner: {spec.name}, {placement.label}",
    )


def binding_rank(result: Plan) -> tuple[RankLedger, ActivationModel, int]:
    """(rank, its activation model, its step headroom) for the distinct rank with the least room to spare at
    the profile run's own shape. Headroom = the ledger's free memory + the rank's activation line."""
    cfg = result.engine
    best: tuple[int, RankLedger, ActivationModel, int] | None = None
    for rank in result.ranks:
        model = activation_of_rank(result, rank)
        headroom = int(rank.gpu.free_bytes) + int(rank.activation.bytes)
        profile_peak = (
            max(
                int(cfg.max_num_batched_tokens * model.forward_bytes_per_token),
                int(cfg.sampler_rows * model.sampler_bytes_per_row),
            )
            + model.fixed_bytes
        )
        margin = headroom - profile_peak
        if best is None or margin < best[0]:
            best = (margin, rank, model, headroom)
    assert best is not None, "a plan has at least one rank"
    return best[1], best[2], best[3]
