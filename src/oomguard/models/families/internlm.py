"""InternLM2 / InternLM2.5: a Llama-shaped decoder with its own names (tok_embeddings, attention.wqkv fused
and
grouped per KV head, feed_forward w1/w3/w2, output)."""

from __future__ import annotations

from oomguard.models.families.base import Cfg, FamilyFacts, Inventory, decoder_shape, family
from oomguard.models.families.common import full_attention, fused_qkv_attention, gated_mlp, single_rope_cache
from oomguard.models.spec import DecoderLayer, DenseMlp, Role


@family("internlm2")
def read_internlm2(cfg: Cfg) -> FamilyFacts:
    shape = decoder_shape(cfg, tied_default=False, head_dim=Cfg.hidden_over_heads)
    hidden, vocab, head_dim = shape.hidden_size, shape.vocab_size, shape.head_dim
    bias = cfg.bool("bias", False)
    inv = Inventory()
    inv.embedding("model.tok_embeddings.weight", vocab, hidden)
    layers = []
    for i in range(shape.num_hidden_layers):
        p = f"model.layers.{i}"
        inv.norm(f"{p}.attention_norm", hidden, i)
        # NOTE: wqkv interleaves [q x (heads/kv), k, v] per KV head; vLLM splits it like q/k/v
        # (QKVParallelLinear).
        fused_qkv_attention(inv, i, f"{p}.attention", shape, qkv="wqkv", o_proj="wo", bias=bias)
        inv.norm(f"{p}.ffn_norm", hidden, i)
        gated_mlp(inv, i, f"{p}.feed_forward", hidden, shape.intermediate_size, gate="w1", up="w3", down="w2")
        layers.append(DecoderLayer(full_attention(shape), DenseMlp(shape.intermediate_size)))
    inv.norm("model.norm", hidden, None)
    # NOTE: InternLM2's head is `output`, stored after the final norm.
    if not shape.tie_word_embeddings:
        inv.embedding("output.weight", vocab, hidden, Role.LM_HEAD)
    return FamilyFacts(
        shape, layers, inv, rotary_dim=head_dim, rope_caches=single_rope_cache(cfg, shape, head_dim)
    )
