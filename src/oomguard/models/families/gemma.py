"""Gemma 1/2/3: tied embeddings, explicit head_dim, local sliding-window layers beside global ones."""

from __future__ import annotations

from oomguard.models.families.base import Cfg, DecoderShape, FamilyFacts, Inventory, decoder_shape, family
from oomguard.models.families.common import (
    attention_from_layer_type,
    embed_and_head,
    gated_mlp,
    layer_types,
    local_global_types,
    pre_norm_attention,
    single_rope_cache,
)
from oomguard.models.families.vision import gemma3_tower
from oomguard.models.spec import AttentionKind, DecoderLayer, DenseMlp

# transformers Gemma3TextConfig defaults: the official Gemma-3 configs leave most keys out.
GEMMA3_TEXT_DEFAULTS: dict[str, object] = {
    "vocab_size": 262_208,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "max_position_embeddings": 131_072,
    "sliding_window": 4096,
    "sliding_window_pattern": 6,
    "tie_word_embeddings": True,
}
GEMMA2_DEFAULT_WINDOW = 4096  # transformers Gemma2Config.sliding_window default
GEMMA3_PATTERN = 6  # Gemma3TextConfig.sliding_window_pattern default: 5 local, 1 global
GEMMA_HEAD_DIM = 256  # GemmaConfig / Gemma2Config / Gemma3TextConfig head_dim default
GEMMA3_TOKENS_PER_IMAGE = 256  # Gemma3Config.mm_tokens_per_image default


def _pattern(cfg: Cfg, generation: int, shape: DecoderShape) -> list[AttentionKind]:
    """NOTE: Gemma-2 alternates local/global starting local (even layers slide); Gemma-3 is 5 local : 1 global
    (layer i is global when (i + 1) % sliding_window_pattern == 0); newer configs spell it as layer_types."""
    num_layers = shape.num_hidden_layers
    window = cfg.opt_int("sliding_window")
    types = layer_types(cfg, num_layers)
    if types is None:
        if generation == 1:
            types = ["full_attention"] * num_layers
        elif generation == 2:
            window = window or GEMMA2_DEFAULT_WINDOW
            types = local_global_types(num_layers, 2)
        else:
            types = local_global_types(num_layers, cfg.int("sliding_window_pattern", GEMMA3_PATTERN))
    return [attention_from_layer_type(t, shape.num_key_value_heads, shape.head_dim, window) for t in types]


def gemma_head_dim(cfg: Cfg) -> int:
    """NOTE: Gemma configs spell head_dim out (it is not hidden / heads); GemmaConfig's default is 256."""
    return cfg.int("head_dim", GEMMA_HEAD_DIM)


def read_gemma_text(cfg: Cfg, generation: int, prefix: str = "model") -> FamilyFacts:
    shape = decoder_shape(cfg, tied_default=True, head_dim=gemma_head_dim)
    hidden, head_dim = shape.hidden_size, shape.head_dim
    bias = cfg.bool("attention_bias", False)
    attention = _pattern(cfg, generation, shape)

    inv = Inventory()
    embed_and_head(inv, shape, embed=f"{prefix}.embed_tokens.weight")
    layers = []
    for i in range(shape.num_hidden_layers):
        p = f"{prefix}.layers.{i}"
        pre_norm_attention(inv, i, p, shape, qkv_bias=bias, o_bias=bias, qk_norm=generation >= 3)
        if generation >= 2:
            # NOTE: Gemma-2/3 wrap both attention and MLP in pre- and post-norms: 4 RMSNorms per layer.
            inv.norm(f"{p}.pre_feedforward_layernorm", hidden, i)
            inv.norm(f"{p}.post_feedforward_layernorm", hidden, i)
        gated_mlp(inv, i, f"{p}.mlp", hidden, shape.intermediate_size)
        layers.append(DecoderLayer(attention[i], DenseMlp(shape.intermediate_size)))
    inv.norm(f"{prefix}.norm", hidden, None)

    # NOTE: Gemma-3 local layers use their own unscaled RoPE (rope_local_base_freq): a second cos/sin cache.
    caches = list(single_rope_cache(cfg, shape, head_dim))
    if generation >= 3 and any(a.kind == "sliding_window" for a in attention):
        caches.append((shape.max_position_embeddings, head_dim))
    return FamilyFacts(shape, layers, inv, rotary_dim=head_dim, rope_caches=tuple(dict.fromkeys(caches)))


@family("gemma")
def read_gemma(cfg: Cfg) -> FamilyFacts:
    return read_gemma_text(cfg, 1)


@family("gemma2")
def read_gemma2(cfg: Cfg) -> FamilyFacts:
    return read_gemma_text(cfg, 2)


def _with_defaults(cfg: Cfg, defaults: dict[str, object]) -> Cfg:
    merged = dict(defaults)
    merged.update({k: v for k, v in cfg.data.items() if v is not None})
    return Cfg(merged, cfg.where)


@family("gemma3_text")
def read_gemma3_text(cfg: Cfg) -> FamilyFacts:
    return read_gemma_text(_with_defaults(cfg, GEMMA3_TEXT_DEFAULTS), 3)


@family("gemma3")
def read_gemma3(cfg: Cfg) -> FamilyFacts:
    """Gemma-3 4B/12B/27B: the text decoder plus a SigLIP tower and a projector to the text width."""
    text = cfg.sub("text_config") or Cfg({}, f"{cfg.where}:text_config")
    facts = read_gemma_text(_with_defaults(text, GEMMA3_TEXT_DEFAULTS), 3)
    vision_cfg = cfg.sub("vision_config")
    if vision_cfg is not None:
        facts.vision = gemma3_tower(
            facts.inventory,
            vision_cfg,
            facts.shape.hidden_size,
            cfg.int("mm_tokens_per_image", GEMMA3_TOKENS_PER_IMAGE),
        )
    return facts
