"""Cohere Command-R / Aya (cohere) and Command-R7B / Command-A (cohere2): one LayerNorm (weight only) feeding
attention and MLP in parallel, tied embeddings; Cohere2 adds sliding-window layers with a global one every
`sliding_window_pattern`."""

from __future__ import annotations

from oomguard.models.families.base import Cfg, FamilyFacts, Inventory, family
from oomguard.models.families.common import (
    attention_from_layer_type,
    embed_and_head,
    gated_mlp,
    gqa_attention,
    layer_types,
    rope_cache_positions,
)
from oomguard.models.spec import AttentionKind, DecoderLayer, DenseMlp, FullAttention, Role, Split

# transformers Cohere2Config defaults.
COHERE2_WINDOW = 4096
COHERE2_PATTERN = 4


def _cohere2_pattern(cfg: Cfg, num_layers: int, kv_heads: int, head_dim: int) -> list[AttentionKind]:
    """NOTE: Cohere2 layer i is global when (i + 1) % sliding_window_pattern == 0, else it slides; newer configs
    spell it as layer_types."""
    window = cfg.int("sliding_window", COHERE2_WINDOW)
    types = layer_types(cfg, num_layers)
    if types is None:
        every = cfg.int("sliding_window_pattern", COHERE2_PATTERN)
        types = ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(num_layers)]
    return [attention_from_layer_type(t, kv_heads, head_dim, window) for t in types]


def _read(cfg: Cfg, generation: int) -> FamilyFacts:
    hidden = cfg.int("hidden_size")
    num_layers = cfg.int("num_hidden_layers")
    heads = cfg.int("num_attention_heads")
    kv_heads = cfg.kv_heads()
    head_dim = cfg.head_dim()
    intermediate = cfg.int("intermediate_size")
    vocab = cfg.int("vocab_size")
    # NOTE: vLLM's Cohere models always compute logits with embed_tokens: there is no lm_head to load.
    tied = cfg.bool("tie_word_embeddings", True)
    bias = cfg.bool("attention_bias", False)
    qk_norm = cfg.bool("use_qk_norm", False)
    attention = (_cohere2_pattern(cfg, num_layers, kv_heads, head_dim) if generation == 2
                 else [FullAttention(kv_heads, head_dim, head_dim)] * num_layers)
    inv = Inventory()
    embed_and_head(inv, vocab, hidden, tied)
    layers = []
    for i in range(num_layers):
        p = f"model.layers.{i}"
        inv.norm(f"{p}.input_layernorm", hidden, i)
        gqa_attention(inv, i, f"{p}.self_attn", hidden, heads, kv_heads, head_dim, qkv_bias=bias, o_bias=bias)
        if qk_norm:
            # NOTE: Command-R+ normalizes q and k with one LayerNorm weight per head, sharded with the heads.
            inv.add(f"{p}.self_attn.q_norm.weight", (heads, head_dim), Role.ATTENTION, Split.COLUMN, i,
                    quantizable=False)
            inv.add(f"{p}.self_attn.k_norm.weight", (kv_heads, head_dim), Role.ATTENTION, Split.KV_COLUMN, i,
                    quantizable=False, kv_heads=kv_heads)
        gated_mlp(inv, i, f"{p}.mlp", hidden, intermediate)
        layers.append(DecoderLayer(attention[i], DenseMlp(intermediate)))
    inv.norm("model.norm", hidden, None)
    max_pos = cfg.max_positions()
    return FamilyFacts(
        hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        intermediate_size=intermediate, vocab_size=vocab, max_position_embeddings=max_pos,
        tie_word_embeddings=tied, layers=layers, inventory=inv, rotary_dim=head_dim,
        rope_caches=((rope_cache_positions(cfg, max_pos), head_dim),),
    )


@family("cohere")
def read_cohere(cfg: Cfg) -> FamilyFacts:
    return _read(cfg, 1)


@family("cohere2")
def read_cohere2(cfg: Cfg) -> FamilyFacts:
    return _read(cfg, 2)
