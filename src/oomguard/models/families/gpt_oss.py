"""gpt-oss-20b/120b: alternating 128-token sliding window and full attention, learned attention sinks,
biases everywhere, MXFP4 routed experts stored as `_blocks` + `_scales` with bf16 biases."""

from __future__ import annotations

from oomguard.models.families.base import Cfg, FamilyFacts, Inventory, family
from oomguard.models.families.common import (
    attention_from_layer_type,
    embed_and_head,
    gqa_attention,
    layer_types,
    rope_cache_positions,
    router,
)
from oomguard.models.spec import DecoderLayer, MoeMlp, Role, Split


@family("gpt_oss")
def read_gpt_oss(cfg: Cfg) -> FamilyFacts:
    hidden = cfg.int("hidden_size")
    num_layers = cfg.int("num_hidden_layers")
    heads = cfg.int("num_attention_heads")
    kv_heads = cfg.kv_heads()
    head_dim = cfg.head_dim()
    width = cfg.int("intermediate_size")
    experts = cfg.int("num_local_experts")
    top_k = cfg.int("num_experts_per_tok", cfg.int("experts_per_token", 4))
    vocab = cfg.int("vocab_size")
    tied = cfg.bool("tie_word_embeddings", False)
    window = cfg.int("sliding_window", 128)
    # NOTE: older configs lack layer_types; the model alternates starting with a sliding layer.
    types = layer_types(cfg, num_layers) or [
        "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(num_layers)]
    inv = Inventory()
    embed_and_head(inv, vocab, hidden, tied)
    layers = []
    for i in range(num_layers):
        p = f"model.layers.{i}"
        inv.norm(f"{p}.input_layernorm", hidden, i)
        gqa_attention(inv, i, f"{p}.self_attn", hidden, heads, kv_heads, head_dim, qkv_bias=True, o_bias=True)
        # NOTE: one learned sink logit per head, sharded with the heads.
        inv.add(f"{p}.self_attn.sinks", (heads,), Role.ATTENTION, Split.COLUMN, i, quantizable=False)
        inv.norm(f"{p}.post_attention_layernorm", hidden, i)
        router(inv, i, f"{p}.mlp.router", hidden, experts, bias=True)
        e = f"{p}.mlp.experts"
        inv.experts(f"{e}.gate_up_proj", (2 * width, hidden), experts, i, row=False)
        inv.add(f"{e}.gate_up_proj_bias", (2 * width,), Role.EXPERTS, Split.EXPERT, i, experts=experts,
                quantizable=False, shard_dim=0)
        inv.experts(f"{e}.down_proj", (hidden, width), experts, i, row=True)
        inv.add(f"{e}.down_proj_bias", (hidden,), Role.EXPERTS, Split.EXPERT, i, experts=experts,
                quantizable=False)
        layers.append(DecoderLayer(attention_from_layer_type(types[i], kv_heads, head_dim, window),
                                   MoeMlp(experts, top_k, width)))
    inv.norm("model.norm", hidden, None)
    max_pos = cfg.max_positions()
    return FamilyFacts(
        hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        intermediate_size=width, vocab_size=vocab, max_position_embeddings=max_pos,
        tie_word_embeddings=tied, layers=layers, inventory=inv, rotary_dim=head_dim,
        rope_caches=((rope_cache_positions(cfg, max_pos), head_dim),),
    )
