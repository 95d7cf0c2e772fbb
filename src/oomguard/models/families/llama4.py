"""Llama-4 Scout/Maverick: chunked local attention on RoPE layers, a global NoPE layer every 4th, MoE layers
every `interleave_moe_layer_step` (the others dense with intermediate_size_mlp), one shared expert, and a
vision encoder with its pixel-shuffle adapter and projector (vision.llama4_tower)."""

from __future__ import annotations

from oomguard.models.families.base import Cfg, FamilyFacts, Inventory, decoder_shape, family
from oomguard.models.families.common import (
    embed_and_head,
    fused_experts,
    gated_mlp,
    pre_norm_attention,
    router,
)
from oomguard.models.families.vision import llama4_tower
from oomguard.models.spec import (
    AttentionKind,
    ChunkedLocalAttention,
    DecoderLayer,
    DenseMlp,
    FullAttention,
    MlpKind,
    MoeMlp,
    Role,
)

NOPE_LAYER_INTERVAL = 4  # transformers Llama4TextConfig default: layer i is NoPE/global when (i + 1) % 4 == 0


def _attention(cfg: Cfg, i: int, kv_heads: int, head_dim: int) -> AttentionKind:
    """NOTE: `no_rope_layers[i] == 0` (or every 4th layer) is a global NoPE layer; RoPE layers attend within
    chunks of attention_chunk_size when it is set."""
    flags = cfg.list("no_rope_layers")
    uses_rope = bool(flags[i]) if flags and i < len(flags) else (i + 1) % NOPE_LAYER_INTERVAL != 0
    chunk = cfg.opt_int("attention_chunk_size")
    if uses_rope and chunk:
        return ChunkedLocalAttention(kv_heads, head_dim, head_dim, chunk)
    return FullAttention(kv_heads, head_dim, head_dim)


def read_llama4_text(cfg: Cfg) -> FamilyFacts:
    # NOTE: intermediate_size is the expert width; dense layers use intermediate_size_mlp.
    shape = decoder_shape(cfg, tied_default=False)
    hidden, expert_width = shape.hidden_size, shape.intermediate_size
    dense_width = cfg.int("intermediate_size_mlp", expert_width)
    experts = cfg.int("num_local_experts")
    top_k = cfg.int("num_experts_per_tok", 1)
    step = cfg.int("interleave_moe_layer_step", 1)
    moe_layers = cfg.list("moe_layers")
    inv = Inventory()
    embed_and_head(inv, shape)
    layers = []
    for i in range(shape.num_hidden_layers):
        p = f"model.layers.{i}"
        # NOTE: Llama-4's qk norm is a weightless L2 norm: no tensors.
        pre_norm_attention(inv, i, p, shape, qkv_bias=cfg.bool("attention_bias", False))
        is_moe = i in moe_layers if moe_layers is not None else step > 0 and (i + 1) % step == 0
        mlp: MlpKind
        if is_moe:
            router(inv, i, f"{p}.feed_forward.router", hidden, experts)
            fused_experts(inv, i, f"{p}.feed_forward.experts", hidden, expert_width, experts)
            gated_mlp(
                inv, i, f"{p}.feed_forward.shared_expert", hidden, expert_width, role=Role.SHARED_EXPERTS
            )
            mlp = MoeMlp(experts, top_k, expert_width, 1, expert_width)
        else:
            gated_mlp(inv, i, f"{p}.feed_forward", hidden, dense_width)
            mlp = DenseMlp(dense_width)
        layers.append(DecoderLayer(_attention(cfg, i, shape.num_key_value_heads, shape.head_dim), mlp))
    inv.norm("model.norm", hidden, None)
    return FamilyFacts(
        shape,
        layers,
        inv,
        rotary_dim=shape.head_dim,
        rope_caches=((shape.max_position_embeddings, shape.head_dim),),
    )


@family("llama4_text")
def read_llama4_text_only(cfg: Cfg) -> FamilyFacts:
    return read_llama4_text(cfg)


@family("llama4")
def read_llama4(cfg: Cfg) -> FamilyFacts:
    facts = read_llama4_text(cfg.sub("text_config") or cfg)
    vision = cfg.sub("vision_config")
    if vision is not None:
        facts.vision = llama4_tower(facts.inventory, vision, facts.shape.hidden_size)
    return facts
