"""Dense decoders normalized by LayerNorm with a bias instead of RMSNorm: StarCoder2 (non-gated GELU MLP,
biases everywhere, a sliding window on every layer) and StableLM-2 (partial RoPE, optional per-head q/k
LayerNorms, optional parallel residual)."""

from __future__ import annotations

from oomguard.models.families.base import Cfg, FamilyFacts, Inventory, decoder_shape, family
from oomguard.models.families.common import (
    embed_and_head,
    full_attention,
    gated_mlp,
    gqa_attention,
    plain_mlp,
    pre_norm_attention,
    rotary_dim,
    single_rope_cache,
    uniform_attention,
)
from oomguard.models.spec import DecoderLayer, DenseMlp, Role, Split


@family("starcoder2")
def read_starcoder2(cfg: Cfg) -> FamilyFacts:
    # NOTE: vLLM's Starcoder2Attention: head_dim = hidden / heads. Starcoder2Config leaves tie_word_embeddings
    # to
    # PretrainedConfig's default, True (3B/7B/15B tie).
    shape = decoder_shape(cfg, tied_default=True, head_dim=Cfg.hidden_over_heads)
    bias = cfg.bool("use_bias", True)
    attention = uniform_attention(cfg, shape)
    inv = Inventory()
    embed_and_head(inv, shape)
    layers = []
    for i in range(shape.num_hidden_layers):
        p = f"model.layers.{i}"
        pre_norm_attention(inv, i, p, shape, qkv_bias=bias, o_bias=bias, norm_bias=True)
        plain_mlp(
            inv,
            i,
            f"{p}.mlp",
            shape.hidden_size,
            shape.intermediate_size,
            up="c_fc",
            down="c_proj",
            bias=bias,
        )
        layers.append(DecoderLayer(attention, DenseMlp(shape.intermediate_size)))
    inv.norm("model.norm", shape.hidden_size, None, bias=True)
    return FamilyFacts(
        shape,
        layers,
        inv,
        rotary_dim=shape.head_dim,
        rope_caches=single_rope_cache(cfg, shape, shape.head_dim),
    )


@family("stablelm")
def read_stablelm(cfg: Cfg) -> FamilyFacts:
    shape = decoder_shape(cfg, tied_default=False, head_dim=Cfg.hidden_over_heads)
    hidden, head_dim = shape.hidden_size, shape.head_dim
    qkv_bias = cfg.bool("use_qkv_bias", False)
    qk_norm = cfg.bool("qk_layernorm", False)
    parallel = cfg.bool("use_parallel_residual", False)
    inv = Inventory()
    embed_and_head(inv, shape)
    layers = []
    for i in range(shape.num_hidden_layers):
        p = f"model.layers.{i}"
        inv.norm(f"{p}.input_layernorm", hidden, i, bias=True)
        gqa_attention(inv, i, f"{p}.self_attn", shape, qkv_bias=qkv_bias)
        if qk_norm:
            # NOTE: StableLM-2-12B: one bias-free LayerNorm per head (q_layernorm.norms.{h}), sharded with the
            # heads.
            # Each rank holds its heads' norms: listed per head as COLUMN so a rank holds 1/TP of their bytes.
            for name, count in (
                ("q_layernorm", shape.num_attention_heads),
                ("k_layernorm", shape.num_key_value_heads),
            ):
                for h in range(count):
                    inv.add(
                        f"{p}.self_attn.{name}.norms.{h}.weight",
                        (head_dim,),
                        Role.ATTENTION,
                        Split.COLUMN,
                        i,
                        quantizable=False,
                    )
        if not parallel:
            # NOTE: with use_parallel_residual one LayerNorm feeds both attention and MLP.
            inv.norm(f"{p}.post_attention_layernorm", hidden, i, bias=True)
        gated_mlp(inv, i, f"{p}.mlp", hidden, shape.intermediate_size)
        layers.append(DecoderLayer(full_attention(shape), DenseMlp(shape.intermediate_size)))
    inv.norm("model.norm", hidden, None, bias=True)
    rot = rotary_dim(cfg, head_dim)
    return FamilyFacts(shape, layers, inv, rotary_dim=rot, rope_caches=single_rope_cache(cfg, shape, rot))
