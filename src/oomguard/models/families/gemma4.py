"""Gemma 4 (gemma4 multimodal wrapper, gemma4_text): sliding and full layers with different head sizes and KV
heads, K reused as V on full layers (`attention_k_eq_v`), an optional MoE block beside the dense MLP, per-layer
input embeddings (PLE) on the small sizes, and a SigLIP-like vision tower with 2-D RoPE.

Names follow the checkpoint (`model.language_model.*`, `model.vision_tower.*`); shapes follow vLLM's gemma4.py.
"""

from __future__ import annotations

from oomguard.errors import ConfigError
from oomguard.models.families.base import Cfg, FamilyFacts, Inventory, family
from oomguard.models.families.common import gated_mlp, rope_cache_positions, router
from oomguard.models.spec import (
    AttentionKind,
    DecoderLayer,
    DenseMlp,
    FullAttention,
    MlpKind,
    MoeMlp,
    Role,
    SharedKvAttention,
    SlidingWindowAttention,
    Split,
    VisionTower,
)

TEXT = "model.language_model"
VISION = "model.vision_tower"


def _rope_rotary_dim(cfg: Cfg, kind: str, head_dim: int) -> int:
    """Rotated dims of one layer type: rope_parameters[kind].partial_rotary_factor x head_dim (full layers: 0.25)."""
    params = cfg.sub("rope_parameters")
    per_kind = params.sub(kind) if params is not None else None
    factor = per_kind.float("partial_rotary_factor", 1.0) if per_kind is not None else 1.0
    return int(head_dim * factor)


def read_gemma4_text(cfg: Cfg) -> FamilyFacts:
    hidden = cfg.int("hidden_size")
    num_layers = cfg.int("num_hidden_layers")
    heads = cfg.int("num_attention_heads")
    kv_heads = cfg.kv_heads()
    head_dim = cfg.int("head_dim", 256)
    global_head_dim = cfg.int("global_head_dim", head_dim)
    k_eq_v = cfg.bool("attention_k_eq_v", False)
    global_kv = cfg.int("num_global_key_value_heads", kv_heads) if k_eq_v else kv_heads
    window = cfg.int("sliding_window")
    intermediate = cfg.int("intermediate_size")
    vocab = cfg.int("vocab_size")
    tied = cfg.bool("tie_word_embeddings", True)
    bias = cfg.bool("attention_bias", False)
    types = cfg.list("layer_types")
    if types is None or len(types) != num_layers or set(types) - {"sliding_attention", "full_attention"}:
        raise ConfigError(f"{cfg.where}: Gemma 4 needs 'layer_types' (sliding_attention / full_attention) for each "
                          f"of the {num_layers} layers")
    shared_kv = cfg.int("num_kv_shared_layers", 0)
    first_shared = num_layers - shared_kv
    double_wide = cfg.bool("use_double_wide_mlp", False)
    moe = cfg.bool("enable_moe_block", False)
    experts = cfg.int("num_experts", 0) if moe else 0
    expert_width = cfg.int("moe_intermediate_size", 0) if moe else 0
    ple = cfg.int("hidden_size_per_layer_input", 0)

    inv = Inventory()
    inv.embedding(f"{TEXT}.embed_tokens.weight", vocab, hidden)
    if ple:
        # NOTE: PLE: a second embedding of num_layers x ple per token, and its projection from the hidden state.
        inv.embedding(f"{TEXT}.embed_tokens_per_layer.weight", cfg.int("vocab_size_per_layer_input", vocab),
                      num_layers * ple)
        inv.linear(f"{TEXT}.per_layer_model_projection", num_layers * ple, hidden, Role.EMBEDDING, Split.COLUMN,
                   None)
        inv.norm(f"{TEXT}.per_layer_projection_norm", ple, None)
    layers = []
    for i, kind in enumerate(types):
        p = f"{TEXT}.layers.{i}"
        full = kind == "full_attention"
        hd = global_head_dim if full else head_dim
        kv = global_kv if full else kv_heads
        a = f"{p}.self_attn"
        inv.norm(f"{p}.input_layernorm", hidden, i)
        inv.linear(f"{a}.q_proj", heads * hd, hidden, Role.ATTENTION, Split.COLUMN, i, bias=bias)
        inv.linear(f"{a}.k_proj", kv * hd, hidden, Role.ATTENTION, Split.KV_COLUMN, i, bias=bias, kv_heads=kv)
        if not (full and k_eq_v):
            # NOTE: k_eq_v full layers store no v_proj; vLLM loads k_proj into both slots of its fused qkv_proj.
            inv.linear(f"{a}.v_proj", kv * hd, hidden, Role.ATTENTION, Split.KV_COLUMN, i, bias=bias, kv_heads=kv)
        inv.linear(f"{a}.o_proj", hidden, heads * hd, Role.ATTENTION, Split.ROW, i, bias=bias)
        inv.norm(f"{a}.q_norm", hd, i, Role.ATTENTION)
        inv.norm(f"{a}.k_norm", hd, i, Role.ATTENTION)   # NOTE: v_norm has no weight
        for norm in ("post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"):
            inv.norm(f"{p}.{norm}", hidden, i)
        width = intermediate * (2 if double_wide and i >= first_shared > 0 else 1)
        gated_mlp(inv, i, f"{p}.mlp", hidden, width)
        mlp: MlpKind = DenseMlp(width)
        if experts:
            router(inv, i, f"{p}.router.proj", hidden, experts)
            inv.add(f"{p}.router.scale", (hidden,), Role.ROUTER, Split.REPLICATED, i, quantizable=False)
            inv.add(f"{p}.router.per_expert_scale", (experts,), Role.ROUTER, Split.REPLICATED, i, quantizable=False)
            inv.experts(f"{p}.experts.gate_up_proj", (2 * expert_width, hidden), experts, i, row=False)
            inv.experts(f"{p}.experts.down_proj", (hidden, expert_width), experts, i, row=True)
            for norm in ("post_feedforward_layernorm_1", "post_feedforward_layernorm_2", "pre_feedforward_layernorm_2"):
                inv.norm(f"{p}.{norm}", hidden, i)
            # NOTE: the dense MLP runs on every token beside the routed experts, like a shared expert.
            mlp = MoeMlp(experts, cfg.int("top_k_experts", 8), expert_width, 1, width)
        if ple:
            inv.linear(f"{p}.per_layer_input_gate", ple, hidden, Role.MLP, Split.REPLICATED, i)
            inv.linear(f"{p}.per_layer_projection", hidden, ple, Role.MLP, Split.REPLICATED, i)
            inv.norm(f"{p}.post_per_layer_input_norm", hidden, i)
        inv.add(f"{p}.layer_scalar", (1,), Role.NORM, Split.REPLICATED, i, quantizable=False)
        attention: AttentionKind = (FullAttention(kv, hd, hd) if full
                                    else SlidingWindowAttention(kv, hd, hd, window))
        if i >= first_shared > 0 and isinstance(attention, (FullAttention, SlidingWindowAttention)):
            attention = SharedKvAttention(attention)
        layers.append(DecoderLayer(attention, mlp))
    inv.norm(f"{TEXT}.norm", hidden, None)
    if not tied:
        inv.embedding("lm_head.weight", vocab, hidden, Role.LM_HEAD)
    max_pos = cfg.max_positions()
    caches = [(max_pos, _rope_rotary_dim(cfg, "sliding_attention", head_dim))]
    if "full_attention" in types:
        caches.append((rope_cache_positions(cfg, max_pos), _rope_rotary_dim(cfg, "full_attention", global_head_dim)))
    notes = []
    if k_eq_v:
        notes.append("attention_k_eq_v: vLLM also allocates a V copy of k_proj on each full layer (not stored)")
    if shared_kv:
        notes.append(f"the last {shared_kv} layers reuse the KV cache of earlier layers of their type "
                     f"(vLLM allocates none for them)")
    return FamilyFacts(
        hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        intermediate_size=intermediate, vocab_size=vocab, max_position_embeddings=max_pos,
        tie_word_embeddings=tied, layers=layers, inventory=inv, rotary_dim=head_dim,
        rope_caches=tuple(dict.fromkeys(caches)), notes=notes,
    )


def gemma4_vision_tower(inv: Inventory, vc: Cfg, text_hidden: int) -> VisionTower:
    """Gemma 4 vision encoder: a linear patch embedding, a 2 x positions x hidden position table, blocks with
    q/k norms and four RMSNorms around a GeGLU MLP, then a bias-free projection to the text width."""
    start = len(inv.tensors)
    hidden = vc.int("hidden_size")
    inter = vc.int("intermediate_size")
    layers = vc.int("num_hidden_layers")
    heads = vc.int("num_attention_heads")
    kv_heads = vc.int("num_key_value_heads", heads)
    head_dim = vc.int("head_dim", hidden // max(1, heads))
    patch = vc.int("patch_size", 16)
    positions = vc.int("position_embedding_size")

    def lin(name: str, out_f: int, in_f: int) -> None:
        inv.linear(name, out_f, in_f, Role.VISION, Split.REPLICATED, None, quantizable=False)

    lin(f"{VISION}.patch_embedder.input_proj", hidden, 3 * patch * patch)
    inv.add(f"{VISION}.patch_embedder.position_embedding_table", (2, positions, hidden), Role.VISION,
            Split.REPLICATED, quantizable=False)
    for i in range(layers):
        p = f"{VISION}.encoder.layers.{i}"
        # NOTE: each projection is a clippable linear (`.linear.weight` plus scalar clip bounds, not counted).
        lin(f"{p}.self_attn.q_proj.linear", heads * head_dim, hidden)
        lin(f"{p}.self_attn.k_proj.linear", kv_heads * head_dim, hidden)
        lin(f"{p}.self_attn.v_proj.linear", kv_heads * head_dim, hidden)
        lin(f"{p}.self_attn.o_proj.linear", hidden, heads * head_dim)
        inv.norm(f"{p}.self_attn.q_norm", head_dim, None, Role.VISION)
        inv.norm(f"{p}.self_attn.k_norm", head_dim, None, Role.VISION)
        for norm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"):
            inv.norm(f"{p}.{norm}", hidden, None, Role.VISION)
        lin(f"{p}.mlp.gate_proj.linear", inter, hidden)
        lin(f"{p}.mlp.up_proj.linear", inter, hidden)
        lin(f"{p}.mlp.down_proj.linear", hidden, inter)
    lin("model.embed_vision.embedding_projection", text_hidden, hidden)
    return VisionTower(num_params=sum(t.numel for t in inv.tensors[start:]), hidden_size=hidden, num_layers=layers)


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
        tower = gemma4_vision_tower(facts.inventory, vision, facts.hidden_size)
        facts.vision = VisionTower(num_params=tower.num_params, hidden_size=tower.hidden_size,
                                   num_layers=tower.num_layers,
                                   tokens_per_item=cfg.int("vision_soft_tokens_per_image", 280))
    if cfg.sub("audio_config") is not None:
        facts.notes.append("audio tower not modelled")
    return facts
