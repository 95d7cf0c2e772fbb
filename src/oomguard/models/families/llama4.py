"""Llama-4 Scout/Maverick: chunked local attention on RoPE layers, a global NoPE layer every 4th, MoE layers
every `interleave_moe_layer_step` (the others dense with intermediate_size_mlp), one shared expert, and a
vision encoder with its pixel-shuffle adapter and projector."""

from __future__ import annotations

from oomguard.models.families.base import Cfg, FamilyFacts, Inventory, family
from oomguard.models.families.common import embed_and_head, gated_mlp, gqa_attention, router
from oomguard.models.spec import (
    AttentionKind,
    ChunkedLocalAttention,
    DecoderLayer,
    DenseMlp,
    FullAttention,
    MlpKind,
    MoeMlp,
    Role,
    Split,
    VisionTower,
)

NOPE_LAYER_INTERVAL = 4   # transformers Llama4TextConfig default: layer i is NoPE/global when (i + 1) % 4 == 0


def _attention(cfg: Cfg, i: int, kv_heads: int, head_dim: int) -> AttentionKind:
    """NOTE: `no_rope_layers[i] == 0` (or every 4th layer) is a global NoPE layer; RoPE layers attend within
    chunks of attention_chunk_size when it is set."""
    flags = cfg.list("no_rope_layers")
    uses_rope = bool(flags[i]) if flags and i < len(flags) else (i + 1) % NOPE_LAYER_INTERVAL != 0
    chunk = cfg.opt_int("attention_chunk_size")
    if uses_rope and chunk:
        return ChunkedLocalAttention(kv_heads, head_dim, head_dim, chunk)
    return FullAttention(kv_heads, head_dim, head_dim)


def _vision(inv: Inventory, vc: Cfg, text_hidden: int) -> VisionTower:
    start = len(inv.tensors)
    hidden = vc.int("hidden_size", 1408)
    inter = vc.int("intermediate_size", 5632)
    layers = vc.int("num_hidden_layers", 34)
    patch = vc.int("patch_size", 14)
    image = vc.int("image_size", 336)
    channels = vc.int("num_channels", 3)
    ratio = vc.float("pixel_shuffle_ratio", 0.5)
    adapter_in = int(hidden / (ratio * ratio))
    adapter_dim = vc.int("projector_input_dim", 4096)
    adapter_out = vc.int("projector_output_dim", 4096)
    p = "vision_model"

    def lin(name: str, out_f: int, in_f: int, bias: bool) -> None:
        inv.linear(name, out_f, in_f, Role.VISION, Split.REPLICATED, None, bias=bias, quantizable=False)

    lin(f"{p}.patch_embedding.linear", hidden, channels * patch * patch, False)
    inv.add(f"{p}.class_embedding", (hidden,), Role.VISION, Split.REPLICATED, quantizable=False)
    inv.add(f"{p}.positional_embedding_vlm", ((image // patch) ** 2 + 1, hidden), Role.VISION, Split.REPLICATED,
            quantizable=False)
    inv.norm(f"{p}.layernorm_pre", hidden, None, Role.VISION, bias=True)
    inv.norm(f"{p}.layernorm_post", hidden, None, Role.VISION, bias=True)
    for i in range(layers):
        q = f"{p}.model.layers.{i}"
        inv.norm(f"{q}.input_layernorm", hidden, None, Role.VISION, bias=True)
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            lin(f"{q}.self_attn.{proj}", hidden, hidden, True)
        inv.norm(f"{q}.post_attention_layernorm", hidden, None, Role.VISION, bias=True)
        lin(f"{q}.mlp.fc1", inter, hidden, True)
        lin(f"{q}.mlp.fc2", hidden, inter, True)
    lin(f"{p}.vision_adapter.mlp.fc1", adapter_dim, adapter_in, False)
    lin(f"{p}.vision_adapter.mlp.fc2", adapter_out, adapter_dim, False)
    lin("multi_modal_projector.linear_1", text_hidden, adapter_out, False)
    return VisionTower(num_params=sum(t.numel for t in inv.tensors[start:]), hidden_size=hidden,
                       num_layers=layers)


def read_llama4_text(cfg: Cfg) -> FamilyFacts:
    hidden = cfg.int("hidden_size")
    num_layers = cfg.int("num_hidden_layers")
    heads = cfg.int("num_attention_heads")
    kv_heads = cfg.kv_heads()
    head_dim = cfg.head_dim()
    expert_width = cfg.int("intermediate_size")
    dense_width = cfg.int("intermediate_size_mlp", expert_width)
    experts = cfg.int("num_local_experts")
    top_k = cfg.int("num_experts_per_tok", 1)
    step = cfg.int("interleave_moe_layer_step", 1)
    moe_layers = cfg.list("moe_layers")
    vocab = cfg.int("vocab_size")
    tied = cfg.bool("tie_word_embeddings", False)
    inv = Inventory()
    embed_and_head(inv, vocab, hidden, tied)
    layers = []
    for i in range(num_layers):
        p = f"model.layers.{i}"
        inv.norm(f"{p}.input_layernorm", hidden, i)
        # NOTE: Llama-4's qk norm is a weightless L2 norm: no tensors.
        gqa_attention(inv, i, f"{p}.self_attn", hidden, heads, kv_heads, head_dim,
                      qkv_bias=cfg.bool("attention_bias", False))
        inv.norm(f"{p}.post_attention_layernorm", hidden, i)
        is_moe = i in moe_layers if moe_layers is not None else step > 0 and (i + 1) % step == 0
        mlp: MlpKind
        if is_moe:
            router(inv, i, f"{p}.feed_forward.router", hidden, experts)
            inv.experts(f"{p}.feed_forward.experts.gate_up_proj", (2 * expert_width, hidden), experts, i, row=False)
            inv.experts(f"{p}.feed_forward.experts.down_proj", (hidden, expert_width), experts, i, row=True)
            gated_mlp(inv, i, f"{p}.feed_forward.shared_expert", hidden, expert_width, role=Role.SHARED_EXPERTS)
            mlp = MoeMlp(experts, top_k, expert_width, 1, expert_width)
        else:
            gated_mlp(inv, i, f"{p}.feed_forward", hidden, dense_width)
            mlp = DenseMlp(dense_width)
        layers.append(DecoderLayer(_attention(cfg, i, kv_heads, head_dim), mlp))
    inv.norm("model.norm", hidden, None)
    max_pos = cfg.max_positions()
    return FamilyFacts(
        hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        intermediate_size=expert_width, vocab_size=vocab, max_position_embeddings=max_pos,
        tie_word_embeddings=tied, layers=layers, inventory=inv, rotary_dim=head_dim,
        rope_caches=((max_pos, head_dim),),
    )


@family("llama4_text")
def read_llama4_text_only(cfg: Cfg) -> FamilyFacts:
    return read_llama4_text(cfg)


@family("llama4")
def read_llama4(cfg: Cfg) -> FamilyFacts:
    facts = read_llama4_text(cfg.sub("text_config") or cfg)
    vision = cfg.sub("vision_config")
    if vision is not None:
        facts.vision = _vision(facts.inventory, vision, facts.hidden_size)
    return facts
