"""Building blocks shared by the decoder families: attention, MLP, norms, embeddings, RoPE, layer patterns."""

from __future__ import annotations

from oomguard.errors import ConfigError
from oomguard.models.families.base import Cfg, Inventory
from oomguard.models.spec import (
    AttentionKind,
    ChunkedLocalAttention,
    FullAttention,
    MambaState,
    Role,
    SlidingWindowAttention,
    Split,
)


def gqa_attention(inv: Inventory, layer: int, prefix: str, hidden: int, heads: int, kv_heads: int,
                  head_dim: int, *, qkv_bias: bool = False, o_bias: bool = False, qk_norm: bool = False,
                  q_multiplier: int = 1, v_head_dim: int | None = None) -> None:
    """q/k/v/o projections of grouped-query attention (`{prefix}.q_proj` ...), optional q/k RMSNorm per head.

    `q_multiplier` 2 is Qwen3-Next's gated attention (q_proj also emits the output gate)."""
    v_dim = head_dim if v_head_dim is None else v_head_dim
    inv.linear(f"{prefix}.q_proj", heads * head_dim * q_multiplier, hidden, Role.ATTENTION, Split.COLUMN, layer,
               bias=qkv_bias)
    inv.linear(f"{prefix}.k_proj", kv_heads * head_dim, hidden, Role.ATTENTION, Split.KV_COLUMN, layer,
               bias=qkv_bias, kv_heads=kv_heads)
    inv.linear(f"{prefix}.v_proj", kv_heads * v_dim, hidden, Role.ATTENTION, Split.KV_COLUMN, layer,
               bias=qkv_bias, kv_heads=kv_heads)
    inv.linear(f"{prefix}.o_proj", hidden, heads * v_dim, Role.ATTENTION, Split.ROW, layer, bias=o_bias)
    if qk_norm:
        inv.norm(f"{prefix}.q_norm", head_dim, layer, Role.ATTENTION)
        inv.norm(f"{prefix}.k_norm", head_dim, layer, Role.ATTENTION)


def gated_mlp(inv: Inventory, layer: int | None, prefix: str, hidden: int, intermediate: int, *,
              bias: bool = False, role: Role = Role.MLP) -> None:
    """SwiGLU/GeGLU MLP: gate_proj and up_proj (column), down_proj (row)."""
    inv.linear(f"{prefix}.gate_proj", intermediate, hidden, role, Split.COLUMN, layer, bias=bias)
    inv.linear(f"{prefix}.up_proj", intermediate, hidden, role, Split.COLUMN, layer, bias=bias)
    inv.linear(f"{prefix}.down_proj", hidden, intermediate, role, Split.ROW, layer, bias=bias)


def routed_experts(inv: Inventory, layer: int, prefix: str, hidden: int, intermediate: int, num_experts: int,
                   *, gate: str = "gate_proj", up: str = "up_proj", down: str = "down_proj") -> None:
    """Per-expert Linear modules stored as `{prefix}.{e}.gate_proj.weight` (Mixtral names them w1/w3/w2)."""
    inv.experts(f"{prefix}.*.{gate}.weight", (intermediate, hidden), num_experts, layer, row=False)
    inv.experts(f"{prefix}.*.{up}.weight", (intermediate, hidden), num_experts, layer, row=False)
    inv.experts(f"{prefix}.*.{down}.weight", (hidden, intermediate), num_experts, layer, row=True)


def router(inv: Inventory, layer: int, name: str, hidden: int, num_experts: int, *, bias: bool = False) -> None:
    """The MoE gate: a ReplicatedLinear in vLLM (every rank holds it), kept in model dtype by quantizers."""
    inv.linear(name, num_experts, hidden, Role.ROUTER, Split.REPLICATED, layer, bias=bias, quantizable=False)


def embed_and_head(inv: Inventory, vocab: int, hidden: int, tied: bool, *,
                   embed: str = "model.embed_tokens.weight", head: str = "lm_head.weight") -> None:
    inv.embedding(embed, vocab, hidden)
    if not tied:
        inv.embedding(head, vocab, hidden, Role.LM_HEAD)


def rotary_dim(cfg: Cfg, head_dim: int) -> int:
    """Rotated dims per head: head_dim x partial_rotary_factor (Phi, GLM, Qwen3-Next use partial RoPE)."""
    factor = cfg.float("partial_rotary_factor", 1.0)
    rope_params = cfg.sub("rope_parameters")
    if rope_params is not None and rope_params.has("partial_rotary_factor"):
        factor = rope_params.float("partial_rotary_factor", factor)
    return int(head_dim * factor)


def rope_cache_positions(cfg: Cfg, max_positions: int, scaling: Cfg | None = None) -> int:
    """Rows of vLLM's cos/sin cache: max_position_embeddings, times the factor for the scalings whose vLLM
    class builds a longer cache (linear, dynamic NTK, YaRN and its DeepSeek variant)."""
    scaling = scaling if scaling is not None else cfg.sub("rope_scaling")
    if scaling is None:
        return max_positions
    kind = scaling.str("rope_type", scaling.str("type", "default"))
    if kind in ("linear", "dynamic", "yarn", "deepseek_yarn"):
        factor = scaling.float("factor", 1.0)
        original = scaling.opt_int("original_max_position_embeddings")
        base = original if kind in ("yarn", "deepseek_yarn") and original else max_positions
        return int(base * factor)
    return max_positions


def layer_types(cfg: Cfg, num_layers: int) -> list[str] | None:
    """config.json `layer_types` (transformers >= 4.53 writes it for hybrid and sliding models)."""
    types = cfg.list("layer_types")
    if types is None:
        return None
    if len(types) < num_layers or not all(isinstance(t, str) for t in types):
        raise ConfigError(f"{cfg.where}: 'layer_types' must list one string per layer ({num_layers})")
    return [str(t) for t in types[:num_layers]]


def attention_from_layer_type(kind: str, kv_heads: int, head_dim: int, window: int | None,
                              chunk: int | None = None, v_head_dim: int | None = None) -> AttentionKind:
    v_dim = head_dim if v_head_dim is None else v_head_dim
    if kind in ("sliding_attention", "sliding_window", "local"):
        if not window:
            raise ConfigError(f"layer type {kind!r} needs a 'sliding_window' size in config.json")
        return SlidingWindowAttention(kv_heads, head_dim, v_dim, window)
    if kind in ("chunked_attention",):
        if not chunk:
            raise ConfigError("layer type 'chunked_attention' needs 'attention_chunk_size' in config.json")
        return ChunkedLocalAttention(kv_heads, head_dim, v_dim, chunk)
    if kind in ("full_attention", "attention", "global"):
        return FullAttention(kv_heads, head_dim, v_dim)
    raise ConfigError(f"unknown attention layer type {kind!r} in config.json 'layer_types'")


# NOTE: vLLM keeps recurrent state in the model dtype unless --mamba-cache-dtype / --mamba-ssm-cache-dtype (or a
# per-model hook) say otherwise; "auto" is resolved to the model dtype by the KV planner.
STATE_DTYPE_AUTO = "auto"


def mamba2_state(num_heads: int, head_dim: int, state_size: int, n_groups: int, conv_kernel: int,
                 ssm_dtype: str = STATE_DTYPE_AUTO) -> MambaState:
    """Mamba2 per-sequence state (vLLM MambaStateShapeCalculator.mamba2_state_shape): conv state
    (conv_kernel - 1) x (heads·head_dim + 2·groups·N) and SSM state heads x head_dim x N.

    NOTE: vLLM pads n_groups up to the TP size when TP does not divide it (extra_groups_for_head_shards), so
    each rank holds at least one whole group: the conv state is listed as its x part (split by TP) and its
    B/C part (2·N per group, ceil(groups / TP) groups per rank), which sums to vLLM's bytes at every TP."""
    intermediate = num_heads * head_dim
    return MambaState(
        state_shapes=((conv_kernel - 1, intermediate), (conv_kernel - 1, 2 * state_size, n_groups),
                      (num_heads, head_dim, state_size)),
        state_dtypes=(STATE_DTYPE_AUTO, STATE_DTYPE_AUTO, ssm_dtype),
        tp_split_dims=(1, 2, 0),
    )


def mamba1_state(intermediate: int, state_size: int, conv_kernel: int,
                 ssm_dtype: str = STATE_DTYPE_AUTO) -> MambaState:
    """Mamba1 per-sequence state (mamba1_state_shape): conv (conv_kernel - 1) x intermediate and SSM
    intermediate x N, both split by TP along the intermediate dim."""
    return MambaState(state_shapes=((conv_kernel - 1, intermediate), (intermediate, state_size)),
                      state_dtypes=(STATE_DTYPE_AUTO, ssm_dtype), tp_split_dims=(1, 0))


def mamba2_mixer(inv: Inventory, layer: int, prefix: str, hidden: int, num_heads: int, head_dim: int,
                 state_size: int, n_groups: int, conv_kernel: int, *, conv_bias: bool, proj_bias: bool) -> None:
    """Mamba2 mixer weights as checkpoints store them (MambaMixer2): in_proj emits x, z, B, C and dt
    (2·I + 2·G·N + heads), a depthwise conv over x, B, C, per-head A_log / D / dt_bias, a gated RMSNorm over I
    and out_proj back to the hidden size."""
    intermediate = num_heads * head_dim
    conv_dim = intermediate + 2 * n_groups * state_size
    inv.linear(f"{prefix}.in_proj", 2 * intermediate + 2 * n_groups * state_size + num_heads, hidden, Role.MAMBA,
               Split.COLUMN, layer, bias=proj_bias)
    inv.add(f"{prefix}.conv1d.weight", (conv_dim, 1, conv_kernel), Role.MAMBA, Split.COLUMN, layer,
            quantizable=False)
    if conv_bias:
        inv.add(f"{prefix}.conv1d.bias", (conv_dim,), Role.MAMBA, Split.COLUMN, layer, quantizable=False)
    for name in ("dt_bias", "A_log", "D"):
        inv.add(f"{prefix}.{name}", (num_heads,), Role.MAMBA, Split.COLUMN, layer, quantizable=False)
    inv.add(f"{prefix}.norm.weight", (intermediate,), Role.MAMBA, Split.COLUMN, layer, quantizable=False)
    inv.linear(f"{prefix}.out_proj", hidden, intermediate, Role.MAMBA, Split.ROW, layer, bias=proj_bias)
