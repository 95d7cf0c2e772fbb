"""Gemma 1/2/3: tied embeddings, explicit head_dim, local sliding-window layers beside global ones."""

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
from oomguard.models.families.vision import siglip_tower
from oomguard.models.spec import AttentionKind, DecoderLayer, DenseMlp, Role, Split

# transformers Gemma3TextConfig defaults: the official Gemma-3 configs leave most keys out.
GEMMA3_TEXT_DEFAULTS: dict[str, object] = {
    "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131_072,
    "sliding_window": 4096, "sliding_window_pattern": 6, "tie_word_embeddings": True,
}
GEMMA2_DEFAULT_WINDOW = 4096


def _pattern(cfg: Cfg, generation: int, num_layers: int, kv_heads: int, head_dim: int) -> list[AttentionKind]:
    """NOTE: Gemma-2 alternates local/global starting local (even layers slide); Gemma-3 is 5 local : 1 global
    (layer i is global when (i + 1) % sliding_window_pattern == 0); newer configs spell it as layer_types."""
    window = cfg.opt_int("sliding_window")
    types = layer_types(cfg, num_layers)
    if types is None:
        if generation == 1:
            types = ["full_attention"] * num_layers
        elif generation == 2:
            window = window or GEMMA2_DEFAULT_WINDOW
            types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(num_layers)]
        else:
            every = cfg.int("sliding_window_pattern", 6)
            types = ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(num_layers)]
    return [attention_from_layer_type(t, kv_heads, head_dim, window) for t in types]


def read_gemma_text(cfg: Cfg, generation: int, prefix: str = "model") -> FamilyFacts:
    hidden = cfg.int("hidden_size")
    num_layers = cfg.int("num_hidden_layers")
    heads = cfg.int("num_attention_heads")
    kv_heads = cfg.kv_heads()
    head_dim = cfg.int("head_dim", 256)
    intermediate = cfg.int("intermediate_size")
    vocab = cfg.int("vocab_size")
    tied = cfg.bool("tie_word_embeddings", True)
    bias = cfg.bool("attention_bias", False)
    attention = _pattern(cfg, generation, num_layers, kv_heads, head_dim)

    inv = Inventory()
    embed_and_head(inv, vocab, hidden, tied, embed=f"{prefix}.embed_tokens.weight")
    layers = []
    for i in range(num_layers):
        p = f"{prefix}.layers.{i}"
        inv.norm(f"{p}.input_layernorm", hidden, i)
        gqa_attention(inv, i, f"{p}.self_attn", hidden, heads, kv_heads, head_dim, qkv_bias=bias, o_bias=bias,
                      qk_norm=generation >= 3)
        inv.norm(f"{p}.post_attention_layernorm", hidden, i)
        if generation >= 2:
            # NOTE: Gemma-2/3 wrap both attention and MLP in pre- and post-norms: 4 RMSNorms per layer.
            inv.norm(f"{p}.pre_feedforward_layernorm", hidden, i)
            inv.norm(f"{p}.post_feedforward_layernorm", hidden, i)
        gated_mlp(inv, i, f"{p}.mlp", hidden, intermediate)
        layers.append(DecoderLayer(attention[i], DenseMlp(intermediate)))
    inv.norm(f"{prefix}.norm", hidden, None)

    max_pos = cfg.max_positions()
    # NOTE: Gemma-3 local layers use their own unscaled RoPE (rope_local_base_freq): a second cos/sin cache.
    caches = [(rope_cache_positions(cfg, max_pos), head_dim)]
    if generation >= 3 and any(a.kind == "sliding_window" for a in attention):
        caches.append((max_pos, head_dim))
    return FamilyFacts(
        hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        intermediate_size=intermediate, vocab_size=vocab, max_position_embeddings=max_pos,
        tie_word_embeddings=tied, layers=layers, inventory=inv, rotary_dim=head_dim,
        rope_caches=tuple(dict.fromkeys(caches)),
    )


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
        inv = facts.inventory
        start = len(inv.tensors)
        tower = siglip_tower(inv, vision_cfg)
        vision_hidden = tower.hidden_size
        inv.add("multi_modal_projector.mm_input_projection_weight", (vision_hidden, facts.hidden_size),
                Role.VISION, Split.REPLICATED, quantizable=False)
        inv.norm("multi_modal_projector.mm_soft_emb_norm", vision_hidden, None, Role.VISION)
        facts.vision = type(tower)(num_params=sum(t.numel for t in inv.tensors[start:]),
                                   hidden_size=vision_hidden, num_layers=tower.num_layers,
                                   tokens_per_item=cfg.int("mm_tokens_per_image", 256))
    return facts
