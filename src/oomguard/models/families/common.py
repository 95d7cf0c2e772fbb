"""Building blocks shared by the decoder families: attention, MLP, norms, embeddings, RoPE, layer patterns."""

from __future__ import annotations

from oomguard.errors import ConfigError
from oomguard.models.families.base import MAX_CONFIG_INT, Cfg, DecoderShape, Inventory
from oomguard.models.spec import (
    AttentionKind,
    ChunkedLocalAttention,
    FullAttention,
    MambaState,
    MoeMlp,
    Role,
    SlidingWindowAttention,
    Split,
)

# ---------------------------------------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------------------------------------


def gqa_attention(
    inv: Inventory,
    layer: int,
    prefix: str,
    shape: DecoderShape,
    *,
    qkv_bias: bool = False,
    o_bias: bool = False,
    qk_norm: bool = False,
    q_multiplier: int = 1,
    store_v: bool = True,
    sinks: bool = False,
    o_proj: str = "o_proj",
) -> None:
    """q/k/v/o projections of grouped-query attention (`{prefix}.q_proj` ...) over `shape`'s heads, then the
    optional q/k RMSNorm per head and learned sink logits per head.

    `q_multiplier` 2 is Qwen3-Next's gated attention (q_proj also emits the output gate); `store_v` False is
    Gemma-4's K-equals-V layers (no v_proj stored); `o_proj` names the output projection (Phi-2: `dense`)."""
    hidden, heads, kv_heads = shape.hidden_size, shape.num_attention_heads, shape.num_key_value_heads
    head_dim = shape.head_dim
    inv.linear(
        f"{prefix}.q_proj",
        heads * head_dim * q_multiplier,
        hidden,
        Role.ATTENTION,
        Split.COLUMN,
        layer,
        bias=qkv_bias,
    )
    inv.linear(
        f"{prefix}.k_proj",
        kv_heads * head_dim,
        hidden,
        Role.ATTENTION,
        Split.KV_COLUMN,
        layer,
        bias=qkv_bias,
        kv_heads=kv_heads,
    )
    if store_v:
        inv.linear(
            f"{prefix}.v_proj",
            kv_heads * head_dim,
            hidden,
            Role.ATTENTION,
            Split.KV_COLUMN,
            layer,
            bias=qkv_bias,
            kv_heads=kv_heads,
        )
    inv.linear(f"{prefix}.{o_proj}", hidden, heads * head_dim, Role.ATTENTION, Split.ROW, layer, bias=o_bias)
    if qk_norm:
        inv.norm(f"{prefix}.q_norm", head_dim, layer, Role.ATTENTION)
        inv.norm(f"{prefix}.k_norm", head_dim, layer, Role.ATTENTION)
    if sinks:
        inv.add(f"{prefix}.sinks", (heads,), Role.ATTENTION, Split.COLUMN, layer, quantizable=False)


def fused_qkv_attention(
    inv: Inventory,
    layer: int,
    prefix: str,
    shape: DecoderShape,
    *,
    qkv: str = "qkv_proj",
    o_proj: str = "o_proj",
    bias: bool = False,
) -> None:
    """q, k and v stored as one projection (`{prefix}.qkv_proj`). vLLM loads it into QKVParallelLinear, so it
    splits like its parts: listed as one column-parallel tensor."""
    hidden, heads, head_dim = shape.hidden_size, shape.num_attention_heads, shape.head_dim
    inv.linear(
        f"{prefix}.{qkv}",
        (heads + 2 * shape.num_key_value_heads) * head_dim,
        hidden,
        Role.ATTENTION,
        Split.COLUMN,
        layer,
        bias=bias,
    )
    inv.linear(f"{prefix}.{o_proj}", hidden, heads * head_dim, Role.ATTENTION, Split.ROW, layer, bias=bias)


def pre_norm_attention(
    inv: Inventory,
    layer: int,
    prefix: str,
    shape: DecoderShape,
    *,
    qkv_bias: bool = False,
    o_bias: bool = False,
    qk_norm: bool = False,
    sinks: bool = False,
    norm_bias: bool = False,
) -> None:
    """The attention half of a Llama-shaped layer: `{prefix}.input_layernorm`, GQA `{prefix}.self_attn`,
    `{prefix}.post_attention_layernorm` (RMSNorms, or LayerNorms with a bias when `norm_bias`)."""
    inv.norm(f"{prefix}.input_layernorm", shape.hidden_size, layer, bias=norm_bias)
    gqa_attention(
        inv,
        layer,
        f"{prefix}.self_attn",
        shape,
        qkv_bias=qkv_bias,
        o_bias=o_bias,
        qk_norm=qk_norm,
        sinks=sinks,
    )
    inv.norm(f"{prefix}.post_attention_layernorm", shape.hidden_size, layer, bias=norm_bias)


# ---------------------------------------------------------------------------------------------------------
# Dense MLPs
# ---------------------------------------------------------------------------------------------------------


def gated_mlp(
    inv: Inventory,
    layer: int | None,
    prefix: str,
    hidden: int,
    intermediate: int,
    *,
    bias: bool = False,
    role: Role = Role.MLP,
    gate: str = "gate_proj",
    up: str = "up_proj",
    down: str = "down_proj",
) -> None:
    """SwiGLU/GeGLU MLP: gate_proj and up_proj (column), down_proj (row); InternLM2 names them w1/w3/w2."""
    inv.linear(f"{prefix}.{gate}", intermediate, hidden, role, Split.COLUMN, layer, bias=bias)
    inv.linear(f"{prefix}.{up}", intermediate, hidden, role, Split.COLUMN, layer, bias=bias)
    inv.linear(f"{prefix}.{down}", hidden, intermediate, role, Split.ROW, layer, bias=bias)


def fused_gated_mlp(
    inv: Inventory,
    layer: int,
    prefix: str,
    hidden: int,
    intermediate: int,
    *,
    gate_up: str = "gate_up_proj",
    down: str = "down_proj",
    role: Role = Role.MLP,
) -> None:
    """A gated MLP whose gate and up projections are stored as one [2I, H] tensor (Phi-3 `gate_up_proj`,
    Granite
    `input_linear`); vLLM shards it as a merged column-parallel layer, so it splits like its parts."""
    inv.linear(f"{prefix}.{gate_up}", 2 * intermediate, hidden, role, Split.COLUMN, layer)
    inv.linear(f"{prefix}.{down}", hidden, intermediate, role, Split.ROW, layer)


def plain_mlp(
    inv: Inventory,
    layer: int,
    prefix: str,
    hidden: int,
    intermediate: int,
    *,
    up: str,
    down: str,
    bias: bool = False,
    role: Role = Role.MLP,
) -> None:
    """A non-gated MLP: one up projection (column), an activation, one down projection (row)."""
    inv.linear(f"{prefix}.{up}", intermediate, hidden, role, Split.COLUMN, layer, bias=bias)
    inv.linear(f"{prefix}.{down}", hidden, intermediate, role, Split.ROW, layer, bias=bias)


# ---------------------------------------------------------------------------------------------------------
# Mixture of experts
# ---------------------------------------------------------------------------------------------------------


def router(
    inv: Inventory,
    layer: int,
    name: str,
    hidden: int,
    num_experts: int,
    *,
    bias: bool = False,
    score_bias: bool = False,
) -> None:
    """The MoE gate: a ReplicatedLinear in vLLM (every rank holds it), kept in model dtype by quantizers.
    `score_bias`: the learned correction added to sigmoid scores before top-k (`e_score_correction_bias`,
    DeepSeek-V3 / GLM-4.5 / Nemotron-3 noaux_tc routing)."""
    inv.linear(name, num_experts, hidden, Role.ROUTER, Split.REPLICATED, layer, bias=bias, quantizable=False)
    if score_bias:
        inv.add(
            f"{name}.e_score_correction_bias",
            (num_experts,),
            Role.ROUTER,
            Split.REPLICATED,
            layer,
            quantizable=False,
        )


def routed_experts(
    inv: Inventory,
    layer: int,
    prefix: str,
    hidden: int,
    intermediate: int,
    num_experts: int,
    *,
    gate: str | None = "gate_proj",
    up: str = "up_proj",
    down: str = "down_proj",
) -> None:
    """Per-expert Linear modules stored as `{prefix}.{e}.gate_proj.weight` (Mixtral names them w1/w3/w2);
    `gate` None for non-gated experts (up and down only)."""
    if gate is not None:
        inv.experts(f"{prefix}.*.{gate}.weight", (intermediate, hidden), num_experts, layer, row=False)
    inv.experts(f"{prefix}.*.{up}.weight", (intermediate, hidden), num_experts, layer, row=False)
    inv.experts(f"{prefix}.*.{down}.weight", (hidden, intermediate), num_experts, layer, row=True)


def fused_experts(
    inv: Inventory,
    layer: int,
    prefix: str,
    hidden: int,
    intermediate: int,
    num_experts: int,
    *,
    gate_up: str = "gate_up_proj",
    down: str = "down_proj",
    bias: bool = False,
) -> None:
    """Routed experts stored as stacked tensors: `{prefix}.gate_up_proj` [E, 2I, H] and `{prefix}.down_proj`
    [E, H, I] (Llama-4, Gemma-4, gpt-oss; Granite names them input_linear/output_linear), with per-expert
    biases
    `{gate_up}_bias` / `{down}_bias` when `bias` (gpt-oss)."""
    inv.experts(f"{prefix}.{gate_up}", (2 * intermediate, hidden), num_experts, layer, row=False)
    if bias:
        inv.add(
            f"{prefix}.{gate_up}_bias",
            (2 * intermediate,),
            Role.EXPERTS,
            Split.EXPERT,
            layer,
            experts=num_experts,
            quantizable=False,
            shard_dim=0,
        )
    inv.experts(f"{prefix}.{down}", (hidden, intermediate), num_experts, layer, row=True)
    if bias:
        inv.add(
            f"{prefix}.{down}_bias",
            (hidden,),
            Role.EXPERTS,
            Split.EXPERT,
            layer,
            experts=num_experts,
            quantizable=False,
        )


def qwen_moe_block(
    inv: Inventory,
    layer: int,
    prefix: str,
    hidden: int,
    num_experts: int,
    top_k: int,
    expert_width: int,
    shared_width: int,
) -> MoeMlp:
    """Qwen's sparse MoE block (Qwen2-MoE, Qwen3-MoE, Qwen3-Next): router `{prefix}.gate`, gated routed
    `{prefix}.experts`, and when `shared_width` a gated `shared_expert` scaled by a sigmoid
    `shared_expert_gate`."""
    router(inv, layer, f"{prefix}.gate", hidden, num_experts)
    routed_experts(inv, layer, f"{prefix}.experts", hidden, expert_width, num_experts)
    if shared_width:
        gated_mlp(inv, layer, f"{prefix}.shared_expert", hidden, shared_width, role=Role.SHARED_EXPERTS)
        inv.linear(
            f"{prefix}.shared_expert_gate", 1, hidden, Role.ROUTER, Split.REPLICATED, layer, quantizable=False
        )
    return MoeMlp(num_experts, top_k, expert_width, 1 if shared_width else 0, shared_width)


# ---------------------------------------------------------------------------------------------------------
# Embeddings and RoPE
# ---------------------------------------------------------------------------------------------------------


def embed_and_head(
    inv: Inventory,
    shape: DecoderShape,
    *,
    embed: str = "model.embed_tokens.weight",
    head: str = "lm_head.weight",
) -> None:
    """The token embedding, and lm_head unless the head reuses the embedding (tied)."""
    inv.embedding(embed, shape.vocab_size, shape.hidden_size)
    if not shape.tie_word_embeddings:
        inv.embedding(head, shape.vocab_size, shape.hidden_size, Role.LM_HEAD)


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
        if not 0 < factor or base * factor > MAX_CONFIG_INT:  # a negative cache would shrink the weights
            raise ConfigError(f"{scaling.where}: rope_scaling factor {factor!r} is not a real scaling")
        return int(base * factor)
    return max_positions


def single_rope_cache(cfg: Cfg, shape: DecoderShape, rotary_dim: int) -> tuple[tuple[int, int], ...]:
    """The one cos/sin cache every layer shares: (positions vLLM builds it for, rotated dims)."""
    return ((rope_cache_positions(cfg, shape.max_position_embeddings), rotary_dim),)


# ---------------------------------------------------------------------------------------------------------
# Attention kinds per layer (what sizes the KV cache)
# ---------------------------------------------------------------------------------------------------------


def layer_types(cfg: Cfg, num_layers: int) -> list[str] | None:
    """config.json `layer_types` (transformers >= 4.53 writes it for hybrid and sliding models)."""
    types = cfg.list("layer_types")
    if types is None:
        return None
    if len(types) < num_layers or not all(isinstance(t, str) for t in types):
        raise ConfigError(f"{cfg.where}: 'layer_types' must list one string per layer ({num_layers})")
    return [str(t) for t in types[:num_layers]]


def full_attention(shape: DecoderShape) -> FullAttention:
    """Full causal attention over `shape`'s KV heads (K and V as wide as the head)."""
    return FullAttention(shape.num_key_value_heads, shape.head_dim, shape.head_dim)


def uniform_attention(cfg: Cfg, shape: DecoderShape) -> FullAttention | SlidingWindowAttention:
    """One attention kind on every layer: a window of `sliding_window` tokens when the config sets one, else
    full."""
    window = cfg.opt_int("sliding_window")
    if window:
        return SlidingWindowAttention(shape.num_key_value_heads, shape.head_dim, shape.head_dim, window)
    return full_attention(shape)


def local_global_types(num_layers: int, global_every: int) -> list[str]:
    """Layer types of a model that slides on most layers and attends globally on every `global_every`-th one
    (layer i is global when (i + 1) % global_every == 0): Gemma-2 and gpt-oss (2), Cohere2 (4), Gemma-3
    (6)."""
    return [
        "full_attention" if (i + 1) % global_every == 0 else "sliding_attention" for i in range(num_layers)
    ]


def attention_from_layer_type(
    kind: str,
    kv_heads: int,
    head_dim: int,
    window: int | None,
    chunk: int | None = None,
    v_head_dim: int | None = None,
) -> AttentionKind:
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


# ---------------------------------------------------------------------------------------------------------
# Mamba2 mixers
# ---------------------------------------------------------------------------------------------------------

# NOTE: vLLM keeps recurrent state in the model dtype unless --mamba-cache-dtype / --mamba-ssm-cache-dtype (or
# a
# per-model hook) say otherwise; "auto" is resolved to the model dtype by the KV planner.
STATE_DTYPE_AUTO = "auto"


def mamba2_state(
    num_heads: int,
    head_dim: int,
    state_size: int,
    n_groups: int,
    conv_kernel: int,
    ssm_dtype: str = STATE_DTYPE_AUTO,
) -> MambaState:
    """Mamba2 per-sequence state (vLLM MambaStateShapeCalculator.mamba2_state_shape): conv state
    (conv_kernel - 1) x (heads·head_dim + 2·groups·N) and SSM state heads x head_dim x N.

    NOTE: vLLM pads n_groups up to the TP size when TP does not divide it (extra_groups_for_head_shards), so
    each rank holds at least one whole group: the conv state is listed as its x part (split by TP) and its
    B/C part (2·N per group, ceil(groups / TP) groups per rank), which sums to vLLM's bytes at every TP."""
    intermediate = num_heads * head_dim
    return MambaState(
        state_shapes=(
            (conv_kernel - 1, intermediate),
            (conv_kernel - 1, 2 * state_size, n_groups),
            (num_heads, head_dim, state_size),
        ),
        state_dtypes=(STATE_DTYPE_AUTO, STATE_DTYPE_AUTO, ssm_dtype),
        tp_split_dims=(1, 2, 0),
    )


def mamba2_mixer(
    inv: Inventory,
    layer: int,
    prefix: str,
    hidden: int,
    num_heads: int,
    head_dim: int,
    state_size: int,
    n_groups: int,
    conv_kernel: int,
    *,
    conv_bias: bool,
    proj_bias: bool,
) -> None:
    """Mamba2 mixer weights as checkpoints store them (MambaMixer2): in_proj emits x, z, B, C and dt
    (2·I + 2·G·N + heads), a depthwise conv over x, B, C, per-head A_log / D / dt_bias, a gated RMSNorm over I
    and out_proj back to the hidden size.

    NOTE: in_proj and conv1d (weight and bias) are sized for n_groups padded up to TP when TP does not divide
    it,
    so each rank holds its heads' share plus ceil(G / TP) whole B/C groups (GROUPED_COLUMN)."""
    intermediate = num_heads * head_dim
    group_rows = 2 * n_groups * state_size
    conv_dim = intermediate + group_rows
    projected = 2 * intermediate + group_rows + num_heads

    def grouped(name: str, shape: tuple[int, ...], quantizable: bool) -> None:
        inv.add(
            f"{prefix}.{name}",
            shape,
            Role.MAMBA,
            Split.GROUPED_COLUMN,
            layer,
            quantizable=quantizable,
            groups=n_groups,
            group_rows=group_rows,
        )

    grouped("in_proj.weight", (projected, hidden), True)
    if proj_bias:
        grouped("in_proj.bias", (projected,), False)
    grouped("conv1d.weight", (conv_dim, 1, conv_kernel), False)
    if conv_bias:
        grouped("conv1d.bias", (conv_dim,), False)
    for name in ("dt_bias", "A_log", "D"):
        inv.add(f"{prefix}.{name}", (num_heads,), Role.MAMBA, Split.COLUMN, layer, quantizable=False)
    inv.add(f"{prefix}.norm.weight", (intermediate,), Role.MAMBA, Split.COLUMN, layer, quantizable=False)
    inv.linear(f"{prefix}.out_proj", hidden, intermediate, Role.MAMBA, Split.ROW, layer, bias=proj_bias)
