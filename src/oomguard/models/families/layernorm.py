"""Dense decoders normalized by LayerNorm with a bias instead of RMSNorm: StarCoder2 (non-gated GELU MLP,
biases everywhere, a sliding window on every layer) and StableLM-2 (partial RoPE, optional per-head q/k
LayerNorms, optional parallel residual)."""

from __future__ import annotations

from oomguard.models.families.base import Cfg, FamilyFacts, Inventory, family
from oomguard.models.families.common import (
    embed_and_head,
    gated_mlp,
    gqa_attention,
    rope_cache_positions,
    rotary_dim,
)
from oomguard.models.spec import DecoderLayer, DenseMlp, FullAttention, Role, SlidingWindowAttention, Split


@family("starcoder2")
def read_starcoder2(cfg: Cfg) -> FamilyFacts:
    hidden = cfg.int("hidden_size")
    num_layers = cfg.int("num_hidden_layers")
    heads = cfg.int("num_attention_heads")
    kv_heads = cfg.kv_heads()
    head_dim = hidden // heads          # NOTE: vLLM's Starcoder2Attention: head_dim = hidden / heads
    intermediate = cfg.int("intermediate_size")
    vocab = cfg.int("vocab_size")
    # NOTE: Starcoder2Config leaves tie_word_embeddings to PretrainedConfig's default, True (3B/7B/15B tie).
    tied = cfg.bool("tie_word_embeddings", True)
    bias = cfg.bool("use_bias", True)
    window = cfg.opt_int("sliding_window")
    attention = (SlidingWindowAttention(kv_heads, head_dim, head_dim, window) if window
                 else FullAttention(kv_heads, head_dim, head_dim))
    inv = Inventory()
    embed_and_head(inv, vocab, hidden, tied)
    layers = []
    for i in range(num_layers):
        p = f"model.layers.{i}"
        inv.norm(f"{p}.input_layernorm", hidden, i, bias=True)
        gqa_attention(inv, i, f"{p}.self_attn", hidden, heads, kv_heads, head_dim, qkv_bias=bias, o_bias=bias)
        inv.norm(f"{p}.post_attention_layernorm", hidden, i, bias=True)
        inv.linear(f"{p}.mlp.c_fc", intermediate, hidden, Role.MLP, Split.COLUMN, i, bias=bias)
        inv.linear(f"{p}.mlp.c_proj", hidden, intermediate, Role.MLP, Split.ROW, i, bias=bias)
        layers.append(DecoderLayer(attention, DenseMlp(intermediate)))
    inv.norm("model.norm", hidden, None, bias=True)
    max_pos = cfg.max_positions()
    return FamilyFacts(
        hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        intermediate_size=intermediate, vocab_size=vocab, max_position_embeddings=max_pos,
        tie_word_embeddings=tied, layers=layers, inventory=inv, rotary_dim=head_dim,
        rope_caches=((rope_cache_positions(cfg, max_pos), head_dim),),
    )


@family("stablelm")
def read_stablelm(cfg: Cfg) -> FamilyFacts:
    hidden = cfg.int("hidden_size")
    num_layers = cfg.int("num_hidden_layers")
    heads = cfg.int("num_attention_heads")
    kv_heads = cfg.kv_heads()
    head_dim = hidden // heads
    intermediate = cfg.int("intermediate_size")
    vocab = cfg.int("vocab_size")
    tied = cfg.bool("tie_word_embeddings", False)
    qkv_bias = cfg.bool("use_qkv_bias", False)
    qk_norm = cfg.bool("qk_layernorm", False)
    parallel = cfg.bool("use_parallel_residual", False)
    inv = Inventory()
    embed_and_head(inv, vocab, hidden, tied)
    layers = []
    for i in range(num_layers):
        p = f"model.layers.{i}"
        inv.norm(f"{p}.input_layernorm", hidden, i, bias=True)
        gqa_attention(inv, i, f"{p}.self_attn", hidden, heads, kv_heads, head_dim, qkv_bias=qkv_bias)
        if qk_norm:
            # NOTE: StableLM-2-12B: one bias-free LayerNorm per head (q_layernorm.norms.{h}), sharded with the heads.
            # Each rank holds its heads' norms: listed per head as COLUMN so a rank holds 1/TP of their bytes.
            for name, count in (("q_layernorm", heads), ("k_layernorm", kv_heads)):
                for h in range(count):
                    inv.add(f"{p}.self_attn.{name}.norms.{h}.weight", (head_dim,), Role.ATTENTION, Split.COLUMN, i,
                            quantizable=False)
        if not parallel:
            # NOTE: with use_parallel_residual one LayerNorm feeds both attention and MLP.
            inv.norm(f"{p}.post_attention_layernorm", hidden, i, bias=True)
        gated_mlp(inv, i, f"{p}.mlp", hidden, intermediate)
        layers.append(DecoderLayer(FullAttention(kv_heads, head_dim, head_dim), DenseMlp(intermediate)))
    inv.norm("model.norm", hidden, None, bias=True)
    rot = rotary_dim(cfg, head_dim)
    max_pos = cfg.max_positions()
    return FamilyFacts(
        hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        intermediate_size=intermediate, vocab_size=vocab, max_position_embeddings=max_pos,
        tie_word_embeddings=tied, layers=layers, inventory=inv, rotary_dim=rot,
        rope_caches=((rope_cache_positions(cfg, max_pos), rot),),
    )
