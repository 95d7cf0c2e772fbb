"""Cohere Command-R / Aya (cohere) and Command-R7B / Command-A (cohere2): one LayerNorm (weight only) feeding
attention and MLP in parallel, tied embeddings; Cohere2 adds sliding-window layers with a global one every
`sliding_window_pattern`."""

from __future__ import annotations

from oomguard.models.families.base import Cfg, DecoderShape, FamilyFacts, Inventory, decoder_shape, family
from oomguard.models.families.common import (
    attention_from_layer_type,
    embed_and_head,
    full_attention,
    gated_mlp,
    gqa_attention,
    layer_types,
    local_global_types,
    single_rope_cache,
)
from oomguard.models.spec import AttentionKind, DecoderLayer, DenseMlp, Role, Split

# transformers Cohere2Config defaults.
COHERE2_WINDOW = 4096
COHERE2_PATTERN = 4


def _cohere2_pattern(cfg: Cfg, shape: DecoderShape) -> list[AttentionKind]:
    """NOTE: Cohere2 layer i is global when (i + 1) % sliding_window_pattern == 0, else it slides; newer
    configs
    spell it as layer_types."""
    num_layers = shape.num_hidden_layers
    window = cfg.int("sliding_window", COHERE2_WINDOW)
    types = layer_types(cfg, num_layers)
    if types is None:
        types = local_global_types(num_layers, cfg.int("sliding_window_pattern", COHERE2_PATTERN))
    return [attention_from_layer_type(t, shape.num_key_value_heads, shape.head_dim, window) for t in types]


def _read(cfg: Cfg, generation: int) -> FamilyFacts:
    # NOTE: vLLM's Cohere models always compute logits with embed_tokens: there is no lm_head to load.
    shape = decoder_shape(cfg, tied_default=True)
    hidden, heads, kv_heads, head_dim = (
        shape.hidden_size,
        shape.num_attention_heads,
        shape.num_key_value_heads,
        shape.head_dim,
    )
    bias = cfg.bool("attention_bias", False)
    qk_norm = cfg.bool("use_qk_norm", False)
    attention = (
        _cohere2_pattern(cfg, shape) if generation == 2 else [full_attention(shape)] * shape.num_hidden_layers
    )
    inv = Inventory()
    embed_and_head(inv, shape)
    layers = []
    for i in range(shape.num_hidden_layers):
        p = f"model.layers.{i}"
        # NOTE: one LayerNorm feeds attention and MLP in parallel: no post-attention norm.
        inv.norm(f"{p}.input_layernorm", hidden, i)
        gqa_attention(inv, i, f"{p}.self_attn", shape, qkv_bias=bias, o_bias=bias)
        if qk_norm:
            # NOTE: Command-R+ normalizes q and k with one LayerNorm weight per head, sharded with the heads.
            inv.add(
                f"{p}.self_attn.q_norm.weight",
                (heads, head_dim),
                Role.ATTENTION,
                Split.COLUMN,
                i,
                quantizable=False,
            )
            inv.add(
                f"{p}.self_attn.k_norm.weight",
                (kv_heads, head_dim),
                Role.ATTENTION,
                Split.KV_COLUMN,
                i,
                quantizable=False,
                kv_heads=kv_heads,
            )
        gated_mlp(inv, i, f"{p}.mlp", hidden, shape.intermediate_size)
        layers.append(DecoderLayer(attention[i], DenseMlp(shape.intermediate_size)))
    inv.norm("model.norm", hidden, None)
    return FamilyFacts(
        shape, layers, inv, rotary_dim=head_dim, rope_caches=single_rope_cache(cfg, shape, head_dim)
    )


@family("cohere")
def read_cohere(cfg: Cfg) -> FamilyFacts:
    return _read(cfg, 1)


@family("cohere2")
def read_cohere2(cfg: Cfg) -> FamilyFacts:
    return _read(cfg, 2)
