"""InternLM2 / InternLM2.5: a Llama-shaped decoder with its own names (tok_embeddings, attention.wqkv fused and
grouped per KV head, feed_forward w1/w3/w2, output)."""

from __future__ import annotations

from oomguard.models.families.base import Cfg, FamilyFacts, Inventory, family
from oomguard.models.families.common import rope_cache_positions
from oomguard.models.spec import DecoderLayer, DenseMlp, FullAttention, Role, Split


@family("internlm2")
def read_internlm2(cfg: Cfg) -> FamilyFacts:
    hidden = cfg.int("hidden_size")
    num_layers = cfg.int("num_hidden_layers")
    heads = cfg.int("num_attention_heads")
    kv_heads = cfg.kv_heads()
    head_dim = hidden // heads
    intermediate = cfg.int("intermediate_size")
    vocab = cfg.int("vocab_size")
    tied = cfg.bool("tie_word_embeddings", False)
    bias = cfg.bool("bias", False)
    inv = Inventory()
    inv.embedding("model.tok_embeddings.weight", vocab, hidden)
    layers = []
    for i in range(num_layers):
        p = f"model.layers.{i}"
        inv.norm(f"{p}.attention_norm", hidden, i)
        # NOTE: wqkv interleaves [q x (heads/kv), k, v] per KV head; vLLM splits it like q/k/v (QKVParallelLinear).
        inv.linear(f"{p}.attention.wqkv", (heads + 2 * kv_heads) * head_dim, hidden, Role.ATTENTION, Split.COLUMN,
                   i, bias=bias)
        inv.linear(f"{p}.attention.wo", hidden, heads * head_dim, Role.ATTENTION, Split.ROW, i, bias=bias)
        inv.norm(f"{p}.ffn_norm", hidden, i)
        inv.linear(f"{p}.feed_forward.w1", intermediate, hidden, Role.MLP, Split.COLUMN, i)
        inv.linear(f"{p}.feed_forward.w3", intermediate, hidden, Role.MLP, Split.COLUMN, i)
        inv.linear(f"{p}.feed_forward.w2", hidden, intermediate, Role.MLP, Split.ROW, i)
        layers.append(DecoderLayer(FullAttention(kv_heads, head_dim, head_dim), DenseMlp(intermediate)))
    inv.norm("model.norm", hidden, None)
    if not tied:
        inv.embedding("output.weight", vocab, hidden, Role.LM_HEAD)
    max_pos = cfg.max_positions()
    return FamilyFacts(
        hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        intermediate_size=intermediate, vocab_size=vocab, max_position_embeddings=max_pos,
        tie_word_embeddings=tied, layers=layers, inventory=inv, rotary_dim=head_dim,
        rope_caches=((rope_cache_positions(cfg, max_pos), head_dim),),
    )
