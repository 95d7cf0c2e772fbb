"""Dense Llama-shaped decoders: Llama 2/3/3.x, CodeLlama, Mistral, Qwen2/2.5, Qwen3, Granite 3.x.

All share: token embedding, per layer (RMSNorm, GQA attention, RMSNorm, SwiGLU MLP), final RMSNorm, lm_head.
They differ only in biases, q/k norm, sliding windows and defaults, which the table below records.
"""

from __future__ import annotations

from dataclasses import dataclass

from oomguard.models.families.base import Cfg, DecoderShape, FamilyFacts, Inventory, decoder_shape, family
from oomguard.models.families.common import (
    attention_from_layer_type,
    embed_and_head,
    full_attention,
    gated_mlp,
    layer_types,
    pre_norm_attention,
    rotary_dim,
    single_rope_cache,
)
from oomguard.models.spec import AttentionKind, DecoderLayer, DenseMlp, SlidingWindowAttention


@dataclass(frozen=True)
class DenseVariant:
    qkv_bias_key: str | None  # config key that turns on q/k/v biases (None: the family never has them)
    qkv_bias_default: bool
    qk_norm: bool
    tied_default: bool  # the family's config class default for tie_word_embeddings


# NOTE: each transformers config class has its own tie_word_embeddings default; sparse configs rely on it.
VARIANTS: dict[str, DenseVariant] = {
    "llama": DenseVariant("attention_bias", False, False, False),
    "mistral": DenseVariant(None, False, False, False),
    "qwen2": DenseVariant(None, True, False, False),  # Qwen2 always has q/k/v bias, never o bias
    "qwen3": DenseVariant("attention_bias", False, True, False),
    "granite": DenseVariant("attention_bias", False, False, True),
}


def sliding_pattern(cfg: Cfg, model_type: str, shape: DecoderShape) -> list[AttentionKind]:
    """Per-layer attention kinds of a dense decoder.

    NOTE: Qwen2/2.5/3 configs carry a `sliding_window` that is inert unless `use_sliding_window` is true (then
    only layers >= max_window_layers slide); Mistral v0.1 has a real 4096 window on every layer."""
    num_layers, kv_heads, head_dim = shape.num_hidden_layers, shape.num_key_value_heads, shape.head_dim
    window = cfg.opt_int("sliding_window")
    full = full_attention(shape)
    qwen = model_type in ("qwen2", "qwen3")
    if qwen and not cfg.bool("use_sliding_window", False):
        return [full] * num_layers
    types = layer_types(cfg, num_layers)
    if types is not None:
        return [attention_from_layer_type(t, kv_heads, head_dim, window) for t in types]
    if not window:
        return [full] * num_layers
    slide = SlidingWindowAttention(kv_heads, head_dim, head_dim, window)
    first_sliding = cfg.int("max_window_layers", 0) if qwen else 0
    return [slide if i >= first_sliding else full for i in range(num_layers)]


def read_dense(cfg: Cfg, model_type: str) -> FamilyFacts:
    variant = VARIANTS[model_type]
    shape = decoder_shape(cfg, tied_default=variant.tied_default)
    qkv_bias = variant.qkv_bias_default
    if variant.qkv_bias_key is not None:
        qkv_bias = cfg.bool(variant.qkv_bias_key, variant.qkv_bias_default)
    # NOTE: Llama/Granite `attention_bias` covers o_proj too; Qwen2's built-in bias is q/k/v only.
    o_bias = qkv_bias and model_type in ("llama", "granite")
    mlp_bias = cfg.bool("mlp_bias", False)

    inv = Inventory()
    embed_and_head(inv, shape)
    attention = sliding_pattern(cfg, model_type, shape)
    layers = []
    for i in range(shape.num_hidden_layers):
        prefix = f"model.layers.{i}"
        pre_norm_attention(inv, i, prefix, shape, qkv_bias=qkv_bias, o_bias=o_bias, qk_norm=variant.qk_norm)
        gated_mlp(inv, i, f"{prefix}.mlp", shape.hidden_size, shape.intermediate_size, bias=mlp_bias)
        layers.append(DecoderLayer(attention[i], DenseMlp(shape.intermediate_size)))
    inv.norm("model.norm", shape.hidden_size, None)
    rot = rotary_dim(cfg, shape.head_dim)
    return FamilyFacts(shape, layers, inv, rotary_dim=rot, rope_caches=single_rope_cache(cfg, shape, rot))


@family("llama")
def read_llama(cfg: Cfg) -> FamilyFacts:
    return read_dense(cfg, "llama")


@family("mistral")
def read_mistral(cfg: Cfg) -> FamilyFacts:
    return read_dense(cfg, "mistral")


@family("qwen2")
def read_qwen2(cfg: Cfg) -> FamilyFacts:
    return read_dense(cfg, "qwen2")


@family("qwen3")
def read_qwen3(cfg: Cfg) -> FamilyFacts:
    return read_dense(cfg, "qwen3")


@family("granite")
def read_granite(cfg: Cfg) -> FamilyFacts:
    return read_dense(cfg, "granite")
