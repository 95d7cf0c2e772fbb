"""What the simulator needs from the model and the planner, in one place (the adapter).

The simulator needs three things: the KV pool (blocks, block size, KV cache groups), what a step's activations
cost (`ActivationModel`, and the widths the step-time model reads), and the memory a step may use (headroom).

- `from_planner` asks `oomguard.planning.plan` for a real deployment: the pool and groups it computes, the
  activation costs from the planner's own functions (`accounting.forward_peak_bytes`, `sampler_warmup_bytes`,
  `mla_workspace_bytes`, `encoder_cache_bytes`) so that simulate and plan agree on the profile run's shape,
  and the headroom from its per-GPU ledger (what is left after every resident line, plus the activation line
  itself). With several distinct ranks (PP stages, EP ranks) the rank with the thinnest margin at the
  profile shape is the one followed.
- `facts_from_config` reads a config.json minimally (layer kinds, windows, widths), enough for the scheduler
  oracle's model directories; the KV groups follow vLLM's grouping rule (one group per attention kind when the
  layer counts match; otherwise groups of the smallest kind's size, or the largest when it is under 1.5x the
  smallest).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oomguard.errors import ConfigError
from oomguard.inputs import loads_json
from oomguard.models.families.base import Cfg
from oomguard.simulate.kv_pool import KvGroupSpec, cdiv
from oomguard.simulate.step_memory import ActivationModel, ModelWidths

if TYPE_CHECKING:  # the planner is imported when first used, so `oomguard step` alone stays light
    from oomguard.planning import Plan, PlanRequest, RankLedger

GROUP_PADDING_RATIO = 1.5  # vLLM get_kv_cache_groups: pad to the largest count when max < 1.5 x min
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "fp8": 1}


@dataclass(frozen=True)
class ModelFacts:
    name: str
    widths: ModelWidths
    activation: ActivationModel
    num_layers: int
    kv_layer_kinds: tuple[tuple[str, int | None, int], ...]  # (kind, window or chunk, number of layers)
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


def read_config_dir(model: str) -> dict[str, Any] | None:
    """config.json of a local model directory (or a config.json path); None when `model` is not local."""
    path = Path(model)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        return None
    try:
        data = loads_json(path.read_bytes(), f"{path}: config.json", ConfigError)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read config.json ({err})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: config.json is not a JSON object")
    return data


def _layer_kinds(cfg: dict[str, Any], n_layers: int) -> list[tuple[str, int | None]]:
    if cfg.get("kv_lora_rank"):
        return [("mla", None)] * n_layers
    view = Cfg(cfg)
    window = view.int("sliding_window", 0) or None
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) >= n_layers:
        return [
            ("sliding_window", window) if t == "sliding_attention" and window else ("full", None)
            for t in types[:n_layers]
        ]
    pattern = cfg.get("sliding_window_pattern")
    model_type = str(cfg.get("model_type", ""))
    if window and isinstance(pattern, int) and pattern > 1:
        # Gemma-3: every `pattern`-th layer is global, the others local.
        return [
            ("full", None) if (i + 1) % pattern == 0 else ("sliding_window", window) for i in range(n_layers)
        ]
    if window and model_type.startswith("gemma2"):
        return [("sliding_window", window) if i % 2 == 0 else ("full", None) for i in range(n_layers)]
    if window and cfg.get("use_sliding_window", model_type in ("mistral",)):
        return [("sliding_window", window)] * n_layers
    chunk = view.int("attention_chunk_size", 0)
    if chunk:
        # Llama-4: every 4th layer is global (no RoPE), the others chunked-local.
        return [("full", None) if (i + 1) % 4 == 0 else ("chunked_local", chunk) for i in range(n_layers)]
    return [("full", None)] * n_layers


def facts_from_config(cfg: dict[str, Any], name: str) -> ModelFacts:
    nested = cfg.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else cfg  # multimodal configs nest the LM
    # The planner's typed view: a missing, mistyped or absurd value is one ConfigError naming the key.
    view, outer = Cfg(text, f"{name}: config.json"), Cfg(cfg, f"{name}: config.json")
    hidden = view.int("hidden_size")
    layers = view.int("num_hidden_layers")
    heads = view.int("num_attention_heads", 1)
    kv_heads = view.int("num_key_value_heads", heads) or heads
    head_dim = view.int("head_dim", 0) or hidden // max(heads, 1)
    inter = view.int("intermediate_size", 4 * hidden) or 4 * hidden
    vocab = view.int("vocab_size") if view.has("vocab_size") else outer.int("vocab_size", 0)
    dtype = str(text.get("torch_dtype", cfg.get("torch_dtype", "bfloat16")) or "bfloat16")
    dtype_bytes = DTYPE_BYTES.get(dtype, 2)
    experts = (
        view.int("num_experts", 0) or view.int("n_routed_experts", 0) or view.int("num_local_experts", 0)
    )
    topk = view.int("num_experts_per_tok", 0) or view.int("experts_per_token", 0)
    moe_inter = view.int("moe_intermediate_size", 0) or inter
    kinds = _layer_kinds(text, layers)
    counts: dict[tuple[str, int | None], int] = {}
    for kind in kinds:
        counts[kind] = counts.get(kind, 0) + 1
    if view.int("kv_lora_rank", 0):
        per_layer_token = (view.int("kv_lora_rank") + view.int("qk_rope_head_dim", 64)) * dtype_bytes
    else:
        per_layer_token = 2 * kv_heads * head_dim * dtype_bytes
    attn = hidden * (heads * head_dim) * 2 + hidden * kv_heads * head_dim * 2
    if experts and topk:
        mlp_total = experts * 3 * hidden * moe_inter
        mlp_active = topk * 3 * hidden * moe_inter
    else:
        mlp_total = mlp_active = 3 * hidden * inter
    embed = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    widths = ModelWidths(
        hidden_size=hidden,
        dtype_bytes=dtype_bytes,
        intermediate_size=moe_inter if experts and topk else inter,
        vocab_size=vocab,
        num_experts=experts,
        experts_per_token=topk,
    )
    return ModelFacts(
        name=name,
        widths=widths,
        activation=ActivationModel.from_widths(widths),
        num_layers=layers,
        kv_layer_kinds=tuple((k, w, n) for (k, w), n in counts.items()),
        kv_bytes_per_token=per_layer_token * layers,
        num_params=layers * (attn + mlp_total) + embed,
        active_params=layers * (attn + mlp_active) + embed,
        max_position_embeddings=view.int("max_position_embeddings", 0),
    )


def kv_groups(facts: ModelFacts, block_size: int) -> tuple[KvGroupSpec, ...]:
    """vLLM's KV cache groups for these layer kinds (see the module docstring for the rule)."""
    buckets = facts.kv_layer_kinds
    if len(buckets) == 1:
        kind, window, _ = buckets[0]
        return (_group(kind, window, block_size),)
    sizes = [n for _, _, n in buckets]
    smallest, largest = min(sizes), max(sizes)
    group_size = largest if largest < GROUP_PADDING_RATIO * smallest else smallest
    groups: list[KvGroupSpec] = []
    # vLLM orders groups as the layers first appear; full attention after sliding window in gpt-oss/Gemma.
    for kind, window, n in buckets:
        groups.extend([_group(kind, window, block_size)] * cdiv(n, group_size))
    return tuple(groups)


def _group(kind: str, window: int | None, block_size: int) -> KvGroupSpec:
    if kind == "sliding_window":
        return KvGroupSpec("sliding_window", block_size, sliding_window=window)
    if kind == "chunked_local":
        return KvGroupSpec("chunked_local", block_size, chunk_size=window)
    return KvGroupSpec("mla" if kind == "mla" else "full", block_size)


def from_planner(request: PlanRequest) -> tuple[PoolFacts, ModelFacts, Plan]:
    """Pool, groups, step headroom and activation costs from `oomguard.planning.plan` for a `PlanRequest`."""
    from oomguard.planning import plan

    result = plan(request)
    kv = result.kv
    groups = tuple(_group(str(g.kind), g.sliding_window, int(g.block_size)) for g in kv.groups)
    spec = result.model
    moe = spec.moe
    rank, activation, headroom = binding_rank(result)
    params = int(spec.num_params)
    active = params
    if moe:
        expert = 3 * spec.hidden_size * moe.expert_intermediate_size
        moe_layers = sum(1 for layer in spec.layers if getattr(layer.mlp, "kind", "") == "moe")
        active = params - moe_layers * (moe.num_experts - moe.experts_per_token) * expert
    engine = result.engine
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
    facts = ModelFacts(
        name=str(spec.name),
        widths=widths,
        activation=activation,
        num_layers=int(spec.num_hidden_layers),
        kv_layer_kinds=(),
        kv_bytes_per_token=int(kv.bytes_per_block) // max(int(kv.block_size), 1),
        num_params=params,
        active_params=max(active, 1),
        max_position_embeddings=int(spec.max_position_embeddings),
    )
    where = f" ({rank.placement.label})" if len(result.ranks) > 1 else ""
    pool = PoolFacts(
        int(kv.num_gpu_blocks),
        groups,
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
