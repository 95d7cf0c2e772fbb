"""Mamba2 hybrids: Granite-4.0-H (granitemoehybrid: Mamba2 or attention mixer + MoE and a shared MLP per
layer)
and Nemotron-H (nemotron_h: one block per layer, a Mamba2 mixer, an attention mixer, an MLP or an MoE, as
`hybrid_override_pattern` spells them).

Mamba2 layers keep a fixed-size state per sequence (conv + SSM, `common.mamba2_state`), attention layers a
normal KV cache; vLLM sizes both in one hybrid KV pool.
"""

from __future__ import annotations

from dataclasses import replace

from oomguard.errors import ConfigError
from oomguard.models.families.base import Cfg, FamilyFacts, Inventory, decoder_shape, family
from oomguard.models.families.common import (
    embed_and_head,
    full_attention,
    fused_experts,
    fused_gated_mlp,
    gqa_attention,
    mamba2_mixer,
    mamba2_state,
    plain_mlp,
    routed_experts,
    router,
    single_rope_cache,
)
from oomguard.models.spec import (
    AttentionKind,
    DecoderLayer,
    DenseMlp,
    MoeMlp,
    NoAttention,
    NoMlp,
    Role,
    Split,
)

# transformers GraniteMoeHybridConfig defaults (a real config.json spells them out; partial copies may not).
GRANITE_MAMBA_DEFAULTS = {
    "mamba_n_heads": 128,
    "mamba_n_groups": 1,
    "mamba_d_state": 256,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
}
GRANITE_SHARED_DEFAULT = 1024
# vLLM NemotronHForCausalLMConfig.DEFAULT_MAMBA_SSM_CACHE_DTYPE: the SSM state is float32 unless the config
# (or --mamba-ssm-cache-dtype) says otherwise ("only float32 is known to have no accuracy issues").
NEMOTRON_H_SSM_DTYPE = "float32"


def _granite_layer_types(cfg: Cfg, num_layers: int) -> list[str]:
    """NOTE: transformers >= 4.56 fills a missing `layer_types` with all-Mamba; the released Granite-4.0-H
    configs
    always list them, and Granite-4.0 (non-H) lists only "attention"."""
    types = cfg.list("layer_types")
    if types is None:
        return ["mamba"] * num_layers
    if len(types) != num_layers or any(t not in ("mamba", "attention") for t in types):
        raise ConfigError(
            f"{cfg.where}: 'layer_types' must list 'mamba' or 'attention' for each of the {num_layers} layers"
        )
    return [str(t) for t in types]


@family("granitemoehybrid")
def read_granitemoehybrid(cfg: Cfg) -> FamilyFacts:
    # NOTE: vLLM's GraniteMoeHybridAttention takes head_dim = hidden / heads (no head_dim key);
    # intermediate_size
    # is the expert width.
    shape = decoder_shape(cfg, tied_default=False, head_dim=Cfg.hidden_over_heads)
    hidden, width = shape.hidden_size, shape.intermediate_size
    experts = cfg.int("num_local_experts", 0)
    top_k = cfg.int("num_experts_per_tok", 2)
    shared = cfg.int("shared_intermediate_size", GRANITE_SHARED_DEFAULT)
    bias = cfg.bool("attention_bias", False)
    m_heads = cfg.int("mamba_n_heads", GRANITE_MAMBA_DEFAULTS["mamba_n_heads"])
    expand = cfg.int("mamba_expand", GRANITE_MAMBA_DEFAULTS["mamba_expand"])
    if m_heads == 0 or (expand * hidden) % m_heads:
        raise ConfigError(f"{cfg.where}: mamba_n_heads must divide mamba_expand x hidden_size")
    d_head_raw = cfg.raw("mamba_d_head", "auto")
    m_head_dim = expand * hidden // m_heads if d_head_raw == "auto" else cfg.int("mamba_d_head")
    groups = cfg.int("mamba_n_groups", GRANITE_MAMBA_DEFAULTS["mamba_n_groups"])
    d_state = cfg.int("mamba_d_state", GRANITE_MAMBA_DEFAULTS["mamba_d_state"])
    d_conv = cfg.int("mamba_d_conv", GRANITE_MAMBA_DEFAULTS["mamba_d_conv"])
    state = mamba2_state(m_heads, m_head_dim, d_state, groups, d_conv)
    types = _granite_layer_types(cfg, shape.num_hidden_layers)

    inv = Inventory()
    embed_and_head(inv, shape)
    layers = []
    for i, kind in enumerate(types):
        p = f"model.layers.{i}"
        inv.norm(f"{p}.input_layernorm", hidden, i)
        attention: AttentionKind
        if kind == "mamba":
            mamba2_mixer(
                inv,
                i,
                f"{p}.mamba",
                hidden,
                m_heads,
                m_head_dim,
                d_state,
                groups,
                d_conv,
                conv_bias=cfg.bool("mamba_conv_bias", True),
                proj_bias=cfg.bool("mamba_proj_bias", False),
            )
            attention = state
        else:
            gqa_attention(inv, i, f"{p}.self_attn", shape, qkv_bias=bias, o_bias=bias)
            attention = full_attention(shape)
        inv.norm(f"{p}.post_attention_layernorm", hidden, i)
        if experts:
            # NOTE: routed experts are stored fused: input_linear [E, 2I, H] (gate and up), output_linear [E,
            # H, I].
            moe = f"{p}.block_sparse_moe"
            fused_experts(
                inv,
                i,
                moe,
                hidden,
                width,
                experts,
                gate_up="input_linear.weight",
                down="output_linear.weight",
            )
            router(inv, i, f"{moe}.router.layer", hidden, experts)
        if shared:
            # NOTE: the shared MLP beside the experts (the only MLP of a dense Granite-4.0) is a fused gated
            # MLP.
            fused_gated_mlp(
                inv,
                i,
                f"{p}.shared_mlp",
                hidden,
                shared,
                gate_up="input_linear",
                down="output_linear",
                role=Role.SHARED_EXPERTS if experts else Role.MLP,
            )
        mlp = MoeMlp(experts, top_k, width, 1 if shared else 0, shared) if experts else DenseMlp(shared)
        layers.append(DecoderLayer(attention, mlp))
    inv.norm("model.norm", hidden, None)
    # NOTE: position_embedding_type "nope" (Granite-4.0-H) builds no RoPE cache; "rope" (Granite-4.0 dense)
    # does.
    rope = cfg.str("position_embedding_type", "nope") == "rope"
    return FamilyFacts(
        replace(shape, intermediate_size=shared or width),
        layers,
        inv,
        rotary_dim=shape.head_dim if rope else 0,
        rope_caches=single_rope_cache(cfg, shape, shape.head_dim) if rope else (),
    )


# Nemotron-H block letters (NemotronHConfig.hybrid_override_pattern).
MAMBA_BLOCK, ATTENTION_BLOCK, MLP_BLOCK, MOE_BLOCK = "M", "*", "-", "E"


def _nemotron_pattern(cfg: Cfg, num_layers: int) -> str:
    pattern = cfg.str("hybrid_override_pattern")
    if len(pattern) != num_layers or set(pattern) - {MAMBA_BLOCK, ATTENTION_BLOCK, MLP_BLOCK, MOE_BLOCK}:
        raise ConfigError(
            f"{cfg.where}: 'hybrid_override_pattern' must spell one of M * - E for each of the "
            f"{num_layers} layers"
        )
    return pattern


def _nemotron_mlp_width(cfg: Cfg, mlp_index: int) -> int:
    """NOTE: intermediate_size may be a list: one width per MLP block in order, or a single shared width."""
    raw = cfg.raw("intermediate_size")
    if isinstance(raw, list):
        return int(raw[mlp_index] if len(raw) > 1 else raw[0])
    return cfg.int("intermediate_size")


@family("nemotron_h")
def read_nemotron_h(cfg: Cfg) -> FamilyFacts:
    """NOTE: each Nemotron-H block is a layer of its own, as vLLM numbers them (NemotronHModel builds one
    decoder
    layer per `hybrid_override_pattern` character, and the PP split counts them): a Mamba2 or attention mixer
    without an MLP, or an MLP or MoE without a mixer (no cache)."""
    shape = decoder_shape(cfg, tied_default=False, intermediate=False)
    hidden = shape.hidden_size
    pattern = _nemotron_pattern(cfg, shape.num_hidden_layers)
    m_heads, m_head_dim = cfg.int("mamba_num_heads"), cfg.int("mamba_head_dim")
    groups, d_state, d_conv = (
        cfg.int("n_groups", 8),
        cfg.int("ssm_state_size", 128),
        cfg.int("conv_kernel", 4),
    )
    state = mamba2_state(
        m_heads,
        m_head_dim,
        d_state,
        groups,
        d_conv,
        ssm_dtype=cfg.str("mamba_ssm_cache_dtype", NEMOTRON_H_SSM_DTYPE),
    )
    mlp_bias = cfg.bool("mlp_bias", False)
    bias = cfg.bool("attention_bias", False)

    inv = Inventory()
    embed_and_head(inv, shape, embed="backbone.embeddings.weight")
    layers = []
    mlp_count = 0
    for i, block in enumerate(pattern):
        p = f"backbone.layers.{i}"
        inv.norm(f"{p}.norm", hidden, i)
        if block == MAMBA_BLOCK:
            mamba2_mixer(
                inv,
                i,
                f"{p}.mixer",
                hidden,
                m_heads,
                m_head_dim,
                d_state,
                groups,
                d_conv,
                conv_bias=cfg.bool("use_conv_bias", True),
                proj_bias=cfg.bool("use_bias", False),
            )
            layers.append(DecoderLayer(state, NoMlp()))
        elif block == ATTENTION_BLOCK:
            gqa_attention(inv, i, f"{p}.mixer", shape, qkv_bias=bias, o_bias=bias)
            layers.append(DecoderLayer(full_attention(shape), NoMlp()))
        elif block == MLP_BLOCK:
            width = _nemotron_mlp_width(cfg, mlp_count)
            mlp_count += 1
            # NOTE: Nemotron-H MLPs are not gated: up_proj, squared ReLU, down_proj.
            plain_mlp(inv, i, f"{p}.mixer", hidden, width, up="up_proj", down="down_proj", bias=mlp_bias)
            layers.append(DecoderLayer(NoAttention(), DenseMlp(width)))
        else:
            layers.append(DecoderLayer(NoAttention(), _nemotron_moe(inv, cfg, i, f"{p}.mixer", hidden)))
    inv.norm("backbone.norm_f", hidden, None)
    dense_widths = [layer.mlp.intermediate_size for layer in layers if isinstance(layer.mlp, DenseMlp)]
    moe = next((layer.mlp for layer in layers if isinstance(layer.mlp, MoeMlp)), None)
    intermediate = max(dense_widths) if dense_widths else (moe.expert_intermediate_size if moe else 0)
    # NOTE: Nemotron-H attention layers use no positional embedding: no RoPE cache.
    return FamilyFacts(
        replace(shape, intermediate_size=intermediate),
        layers,
        inv,
        notes=[
            (
                f"{len(pattern)} Nemotron-H layers: {pattern.count(MAMBA_BLOCK)} Mamba2, "
                f"{pattern.count(ATTENTION_BLOCK)} attention, {pattern.count(MLP_BLOCK)} MLP, "
                f"{pattern.count(MOE_BLOCK)} MoE"
            )
        ],
    )


def _nemotron_moe(inv: Inventory, cfg: Cfg, layer: int, prefix: str, hidden: int) -> MoeMlp:
    """Nemotron-3 MoE block: sigmoid router with a correction bias, non-gated routed experts (up/down) and
    n_shared_experts x moe_shared_expert_intermediate_size as one shared MLP; an optional latent projection
    (moe_latent_size) shrinks what the experts see."""
    experts = cfg.int("n_routed_experts")
    width = cfg.int("moe_intermediate_size")
    n_shared = cfg.int("n_shared_experts", 0)
    shared = n_shared * cfg.int("moe_shared_expert_intermediate_size", 0)
    latent = cfg.opt_int("moe_latent_size")
    expert_in = latent or hidden
    router(inv, layer, f"{prefix}.gate", hidden, experts, score_bias=True)
    routed_experts(inv, layer, f"{prefix}.experts", expert_in, width, experts, gate=None)
    if latent:
        inv.linear(f"{prefix}.fc1_latent_proj", latent, hidden, Role.EXPERTS, Split.REPLICATED, layer)
        inv.linear(f"{prefix}.fc2_latent_proj", hidden, latent, Role.EXPERTS, Split.REPLICATED, layer)
    if shared:
        plain_mlp(
            inv,
            layer,
            f"{prefix}.shared_experts",
            hidden,
            shared,
            up="up_proj",
            down="down_proj",
            role=Role.SHARED_EXPERTS,
        )
    return MoeMlp(experts, cfg.int("num_experts_per_tok"), width, 1 if shared else 0, shared)
