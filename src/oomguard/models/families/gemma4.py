"""Gemma 4 (gemma4 multimodal wrapper, gemma4_text): sliding and full layers with different head sizes and KV
heads, K reused as V on full layers (`attention_k_eq_v`), an optional MoE block beside the dense MLP,
per-layer
input embeddings (PLE) on the small sizes, and a SigLIP-like vision tower with 2-D RoPE.

Names follow the checkpoint (`model.language_model.*`, `model.vision_tower.*`); shapes follow vLLM's
gemma4.py.
"""

from __future__ import annotations

from dataclasses import replace

from oomguard.errors import ConfigError
from oomguard.models.families.base import Cfg, FamilyFacts, Inventory, decoder_shape, family
from oomguard.models.families.common import (
    fused_experts,
    gated_mlp,
    gqa_attention,
    rope_cache_positions,
    router,
)
from oomguard.models.families.gemma import gemma_head_dim
from oomguard.models.families.vision import gemma4_tower
from oomguard.models.spec import (
    DecoderLayer,
    DenseMlp,
    FullAttention,
    MlpKind,
    MoeMlp,
    Role,
    SharedKvAttention,
    SlidingWindowAttention,
    Split,
)

TEXT = "model.language_model"
VISION = "model.vision_tower"
# Fallbacks when a config leaves these out: the values the released Gemma 4 configs spell.
GEMMA4_TOP_K = 8
GEMMA4_TOKENS_PER_IMAGE = 280


def _rope_rotary_dim(cfg: Cfg, kind: str, head_dim: int) -> int:
    """Rotated dims of one layer type: rope_parameters[kind].partial_rotary_factor x head_dim (full layers:
    0.25)."""
    params = cfg.sub("rope_parameters")
    per_kind = params.sub(kind) if params is not None else None
    factor = per_kind.float("partial_rotary_factor", 1.0) if per_kind is not None else 1.0
    return int(head_dim * factor)


def read_gemma4_text(cfg: Cfg) -> FamilyFacts:
    shape = decoder_shape(cfg, tied_default=True, head_dim=gemma_head_dim)
    hidden, kv_heads, head_dim = shape.hidden_size, shape.num_key_value_heads, shape.head_dim
    num_layers, vocab = shape.num_hidden_layers, shape.vocab_size
    global_head_dim = cfg.int("global_head_dim", head_dim)
    k_eq_v = cfg.bool("attention_k_eq_v", False)
    global_kv = cfg.int("num_global_key_value_heads", kv_heads) if k_eq_v else kv_heads
    window = cfg.int("sliding_window")
    bias = cfg.bool("attention_bias", False)
    types = cfg.list("layer_types")
    if types is None or len(types) != num_layers or set(types) - {"sliding_attention", "full_attention"}:
        raise ConfigError(
            f"{cfg.where}: Gemma 4 needs 'layer_types' (sliding_attention / full_attention) for each "
            f"of the {num_layers} layers"
        )
    shared_kv = cfg.int("num_kv_shared_layers", 0)
    first_shared = num_layers - shared_kv
    double_wide = cfg.bool("use_double_wide_mlp", False)
    moe = cfg.bool("enable_moe_block", False)
    experts = cfg.int("num_experts", 0) if moe else 0
    expert_width = cfg.int("moe_intermediate_size", 0) if moe else 0
    ple = cfg.int("hidden_size_per_layer_input", 0)
    # NOTE: full layers have their own head size and, with attention_k_eq_v, their own KV head count.
    full_shape = replace(shape, head_dim=global_head_dim, num_key_value_heads=global_kv)

    inv = Inventory()
    inv.embedding(f"{TEXT}.embed_tokens.weight", vocab, hidden)
    if ple:
        # NOTE: PLE: a second embedding of num_layers x ple per token, and its projection from the hidden
        # state.
        inv.embedding(
            f"{TEXT}.embed_tokens_per_layer.weight",
            cfg.int("vocab_size_per_layer_input", vocab),
            num_layers * ple,
        )
        inv.linear(
            f"{TEXT}.per_layer_model_projection", num_layers * ple, hidden, Role.EMBEDDING, Split.COLUMN, None
        )
        inv.norm(f"{TEXT}.per_layer_projection_norm", ple, None)
    layers = []
    for i, kind in enumerate(types):
        p = f"{TEXT}.layers.{i}"
        full = kind == "full_attention"
        layer_shape = full_shape if full else shape
        inv.norm(f"{p}.input_layernorm", hidden, i)
        # NOTE: k_eq_v full layers store no v_proj (vLLM loads k_proj into both slots of its fused qkv_proj);
        # v_norm has no weight.
        gqa_attention(
            inv,
            i,
            f"{p}.self_attn",
            layer_shape,
            qkv_bias=bias,
            o_bias=bias,
            qk_norm=True,
            store_v=not (full and k_eq_v),
        )
        for norm in ("post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"):
            inv.norm(f"{p}.{norm}", hidden, i)
        width = shape.intermediate_size * (2 if double_wide and i >= first_shared > 0 else 1)
        gated_mlp(inv, i, f"{p}.mlp", hidden, width)
        mlp: MlpKind = DenseMlp(width)
        if experts:
            router(inv, i, f"{p}.router.proj", hidden, experts)
            inv.add(f"{p}.router.scale", (hidden,), Role.ROUTER, Split.REPLICATED, i, quantizable=False)
            inv.add(
                f"{p}.router.per_expert_scale",
                (experts,),
                Role.ROUTER,
                Split.REPLICATED,
                i,
                quantizable=False,
            )
            fused_experts(inv, i, f"{p}.experts", hidden, expert_width, experts)
            for norm in (
                "post_feedforward_layernorm_1",
                "post_feedforward_layernorm_2",
                "pre_feedforward_layernorm_2",
            ):
                inv.norm(f"{p}.{norm}", hidden, i)
            # NOTE: the dense MLP runs on every token beside the routed experts, like a shared expert.
            mlp = MoeMlp(experts, cfg.int("top_k_experts", GEMMA4_TOP_K), expert_width, 1, width)
        if ple:
            inv.linear(f"{p}.per_layer_input_gate", ple, hidden, Role.MLP, Split.REPLICATED, i)
            inv.linear(f"{p}.per_layer_projection", hidden, ple, Role.MLP, Split.REPLICATED, i)
            inv.norm(f"{p}.post_per_layer_input_norm", hidden, i)
        inv.add(f"{p}.layer_scalar", (1,), Role.NORM, Split.REPLICATED, i, quantizable=False)
        hd, kv = layer_shape.head_dim, layer_shape.num_key_value_heads
        attention: FullAttention | SlidingWindowAttention = (
            FullAttention(kv, hd, hd) if full else SlidingWindowAttention(kv, hd, hd, window)
        )
        # NOTE: the last num_kv_shared_layers layers read the cache of an earlier layer of their type.
        layers.append(DecoderLayer(SharedKvAttention(attention) if i >= first_shared > 0 else attention, mlp))
    inv.norm(f"{TEXT}.norm", hidden, None)
    if not shape.tie_word_embeddings:
        inv.embedding("lm_head.weight", vocab, hidden, Role.LM_HEAD)
    max_pos = shape.max_position_embeddings
    caches = [(max_pos, _rope_rotary_dim(cfg, "sliding_attention", head_dim))]
    if "full_attention" in types:
        caches.append(
            (rope_cache_positions(cfg, max_pos), _rope_rotary_dim(cfg, "full_attention", global_head_dim))
        )
    notes = []
    if k_eq_v:
        notes.append(
            "attention_k_eq_v: vLLM also allocates a V copy of k_proj on each full layer (not stored)"
        )
    if shared_kv:
        notes.append(
            f"the last {shared_kv} layers reuse the KV cache of earlier layers of their type "
            f"(vLLM allocates none for them)"
        )
    return FamilyFacts(
        shape, layers, inv, rotary_dim=head_dim, rope_caches=tuple(dict.fromkeys(caches)), notes=notes
    )


@family("gemma4_text")
def read_gemma4_text_only(cfg: Cfg) -> FamilyFacts:
    return read_gemma4_text(cfg)


@family("gemma4")
def read_gemma4(cfg: Cfg) -> FamilyFacts:
    """NOTE: audio_config, when present (E2B/E4B), adds an audio tower that is not modelled here."""
    text = cfg.sub("text_config")
    if text is None:
        raise ConfigError(f"{cfg.where}: a gemma4 config needs its 'text_config'")
    facts = read_gemma4_text(text)
    vision = cfg.sub("vision_config")
    if vision is not None:
        facts.vision = gemma4_tower(
            facts.inventory,
            vision,
            facts.shape.hidden_size,
            cfg.int("vision_soft_tokens_per_image", GEMMA4_TOKENS_PER_IMAGE),
            prefix=VISION,
        )
    if cfg.sub("audio_config") is not None:
        facts.notes.append("audio tower not modelled")
    return facts
