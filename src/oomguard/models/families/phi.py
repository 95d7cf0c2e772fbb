"""Phi-2 (parallel attention/MLP block with biases, partial RoPE) and Phi-3/3.5/4 (fused qkv and gate_up)."""

from __future__ import annotations

from oomguard.models.families.base import Cfg, FamilyFacts, Inventory, family
from oomguard.models.families.common import embed_and_head, rope_cache_positions, rotary_dim
from oomguard.models.spec import DecoderLayer, DenseMlp, FullAttention, Role, SlidingWindowAttention, Split


@family("phi3")
def read_phi3(cfg: Cfg) -> FamilyFacts:
    """NOTE: Phi-3 stores q/k/v as one `qkv_proj` and gate/up as one `gate_up_proj`; vLLM shards them as
    merged column-parallel layers, so they split like their parts."""
    hidden = cfg.int("hidden_size")
    num_layers = cfg.int("num_hidden_layers")
    heads = cfg.int("num_attention_heads")
    kv_heads = cfg.kv_heads()
    head_dim = cfg.head_dim()
    intermediate = cfg.int("intermediate_size")
    vocab = cfg.int("vocab_size")
    tied = cfg.bool("tie_word_embeddings", False)
    window = cfg.opt_int("sliding_window")
    attention = (SlidingWindowAttention(kv_heads, head_dim, head_dim, window) if window
                 else FullAttention(kv_heads, head_dim, head_dim))
    inv = Inventory()
    embed_and_head(inv, vocab, hidden, tied)
    layers = []
    for i in range(num_layers):
        p = f"model.layers.{i}"
        inv.norm(f"{p}.input_layernorm", hidden, i)
        inv.linear(f"{p}.self_attn.qkv_proj", (heads + 2 * kv_heads) * head_dim, hidden, Role.ATTENTION,
                   Split.COLUMN, i)
        inv.linear(f"{p}.self_attn.o_proj", hidden, heads * head_dim, Role.ATTENTION, Split.ROW, i)
        inv.norm(f"{p}.post_attention_layernorm", hidden, i)
        inv.linear(f"{p}.mlp.gate_up_proj", 2 * intermediate, hidden, Role.MLP, Split.COLUMN, i)
        inv.linear(f"{p}.mlp.down_proj", hidden, intermediate, Role.MLP, Split.ROW, i)
        layers.append(DecoderLayer(attention, DenseMlp(intermediate)))
    inv.norm("model.norm", hidden, None)
    rot = rotary_dim(cfg, head_dim)
    max_pos = cfg.max_positions()
    return FamilyFacts(
        hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        intermediate_size=intermediate, vocab_size=vocab, max_position_embeddings=max_pos,
        tie_word_embeddings=tied, layers=layers, inventory=inv, rotary_dim=rot,
        rope_caches=((rope_cache_positions(cfg, max_pos), rot),),
    )


@family("phi")
def read_phi2(cfg: Cfg) -> FamilyFacts:
    """Phi-2: one LayerNorm per block feeding attention and MLP in parallel; every linear has a bias,
    lm_head included; RoPE on partial_rotary_factor (0.4) of each head."""
    hidden = cfg.int("hidden_size")
    num_layers = cfg.int("num_hidden_layers")
    heads = cfg.int("num_attention_heads")
    kv_heads = cfg.kv_heads()
    head_dim = cfg.head_dim()
    intermediate = cfg.int("intermediate_size")
    vocab = cfg.int("vocab_size")
    tied = cfg.bool("tie_word_embeddings", False)
    inv = Inventory()
    inv.embedding("model.embed_tokens.weight", vocab, hidden)
    layers = []
    for i in range(num_layers):
        p = f"model.layers.{i}"
        inv.norm(f"{p}.input_layernorm", hidden, i, bias=True)
        inv.linear(f"{p}.self_attn.q_proj", heads * head_dim, hidden, Role.ATTENTION, Split.COLUMN, i, bias=True)
        for name in ("k_proj", "v_proj"):
            inv.linear(f"{p}.self_attn.{name}", kv_heads * head_dim, hidden, Role.ATTENTION, Split.KV_COLUMN, i,
                       bias=True, kv_heads=kv_heads)
        inv.linear(f"{p}.self_attn.dense", hidden, heads * head_dim, Role.ATTENTION, Split.ROW, i, bias=True)
        inv.linear(f"{p}.mlp.fc1", intermediate, hidden, Role.MLP, Split.COLUMN, i, bias=True)
        inv.linear(f"{p}.mlp.fc2", hidden, intermediate, Role.MLP, Split.ROW, i, bias=True)
        layers.append(DecoderLayer(FullAttention(kv_heads, head_dim, head_dim), DenseMlp(intermediate)))
    inv.norm("model.final_layernorm", hidden, None, bias=True)
    if not tied:
        inv.embedding("lm_head.weight", vocab, hidden, Role.LM_HEAD)
        inv.add("lm_head.bias", (vocab,), Role.LM_HEAD, Split.VOCAB, None, quantizable=False)
    rot = rotary_dim(cfg, head_dim)
    max_pos = cfg.max_positions()
    return FamilyFacts(
        hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        intermediate_size=intermediate, vocab_size=vocab, max_position_embeddings=max_pos,
        tie_word_embeddings=tied, layers=layers, inventory=inv, rotary_dim=rot,
        rope_caches=((rope_cache_positions(cfg, max_pos), rot),),
    )
