"""Phi-2 (parallel attention/MLP block with biases, partial RoPE) and Phi-3/3.5/4 (fused qkv and gate_up)."""

from __future__ import annotations

from oomguard.models.families.base import Cfg, FamilyFacts, Inventory, decoder_shape, family
from oomguard.models.families.common import (
    embed_and_head,
    full_attention,
    fused_gated_mlp,
    fused_qkv_attention,
    gqa_attention,
    plain_mlp,
    rotary_dim,
    single_rope_cache,
    uniform_attention,
)
from oomguard.models.spec import DecoderLayer, DenseMlp, Role, Split


@family("phi3")
def read_phi3(cfg: Cfg) -> FamilyFacts:
    """NOTE: Phi-3 stores q/k/v as one `qkv_proj` and gate/up as one `gate_up_proj`."""
    shape = decoder_shape(cfg, tied_default=False)
    hidden = shape.hidden_size
    attention = uniform_attention(cfg, shape)
    inv = Inventory()
    embed_and_head(inv, shape)
    layers = []
    for i in range(shape.num_hidden_layers):
        p = f"model.layers.{i}"
        inv.norm(f"{p}.input_layernorm", hidden, i)
        fused_qkv_attention(inv, i, f"{p}.self_attn", shape)
        inv.norm(f"{p}.post_attention_layernorm", hidden, i)
        fused_gated_mlp(inv, i, f"{p}.mlp", hidden, shape.intermediate_size)
        layers.append(DecoderLayer(attention, DenseMlp(shape.intermediate_size)))
    inv.norm("model.norm", hidden, None)
    rot = rotary_dim(cfg, shape.head_dim)
    return FamilyFacts(shape, layers, inv, rotary_dim=rot, rope_caches=single_rope_cache(cfg, shape, rot))


@family("phi")
def read_phi2(cfg: Cfg) -> FamilyFacts:
    """Phi-2: one LayerNorm per block feeding attention and MLP in parallel; every linear has a bias,
    lm_head included; RoPE on partial_rotary_factor (0.4) of each head."""
    shape = decoder_shape(cfg, tied_default=False)
    hidden, vocab = shape.hidden_size, shape.vocab_size
    inv = Inventory()
    inv.embedding("model.embed_tokens.weight", vocab, hidden)
    layers = []
    for i in range(shape.num_hidden_layers):
        p = f"model.layers.{i}"
        inv.norm(f"{p}.input_layernorm", hidden, i, bias=True)
        # NOTE: Phi-2 calls its output projection `dense`.
        gqa_attention(inv, i, f"{p}.self_attn", shape, qkv_bias=True, o_bias=True, o_proj="dense")
        plain_mlp(inv, i, f"{p}.mlp", hidden, shape.intermediate_size, up="fc1", down="fc2", bias=True)
        layers.append(DecoderLayer(full_attention(shape), DenseMlp(shape.intermediate_size)))
    inv.norm("model.final_layernorm", hidden, None, bias=True)
    if not shape.tie_word_embeddings:
        inv.embedding("lm_head.weight", vocab, hidden, Role.LM_HEAD)
        inv.add("lm_head.bias", (vocab,), Role.LM_HEAD, Split.VOCAB, None, quantizable=False)
    rot = rotary_dim(cfg, shape.head_dim)
    return FamilyFacts(shape, layers, inv, rotary_dim=rot, rope_caches=single_rope_cache(cfg, shape, rot))
