"""Llama-shaped mixture-of-experts decoders: Mixtral, Qwen1.5/Qwen2-MoE (shared expert + its gate), Qwen3-MoE."""

from __future__ import annotations

from oomguard.models.families.base import Cfg, FamilyFacts, Inventory, family
from oomguard.models.families.common import (
    embed_and_head,
    gated_mlp,
    gqa_attention,
    rope_cache_positions,
    rotary_dim,
    routed_experts,
    router,
)
from oomguard.models.families.llama import sliding_pattern
from oomguard.models.spec import DecoderLayer, DenseMlp, MlpKind, MoeMlp, Role, Split


def _is_sparse(cfg: Cfg, layer: int) -> bool:
    """Qwen2/3-MoE: a layer is MoE unless listed in mlp_only_layers or off the decoder_sparse_step beat."""
    only_dense = set(cfg.list("mlp_only_layers") or [])
    step = cfg.int("decoder_sparse_step", 1)
    return layer not in only_dense and step > 0 and (layer + 1) % step == 0


def _read(cfg: Cfg, model_type: str) -> FamilyFacts:
    hidden = cfg.int("hidden_size")
    num_layers = cfg.int("num_hidden_layers")
    heads = cfg.int("num_attention_heads")
    kv_heads = cfg.kv_heads()
    head_dim = cfg.head_dim()
    intermediate = cfg.int("intermediate_size")
    vocab = cfg.int("vocab_size")
    tied = cfg.bool("tie_word_embeddings", False)
    mixtral = model_type == "mixtral"
    num_experts = cfg.int("num_local_experts") if mixtral else cfg.int("num_experts")
    top_k = cfg.int("num_experts_per_tok", 2)
    # NOTE: Mixtral has no moe_intermediate_size: each expert is intermediate_size wide.
    expert_width = intermediate if mixtral else cfg.int("moe_intermediate_size")
    shared_width = cfg.int("shared_expert_intermediate_size", 0) if model_type == "qwen2_moe" else 0
    qkv_bias = model_type == "qwen2_moe" or cfg.bool("attention_bias", False)
    qk_norm = model_type == "qwen3_moe"
    attention = sliding_pattern(cfg, "qwen2" if model_type != "mixtral" else "mistral", num_layers, kv_heads,
                                head_dim)

    inv = Inventory()
    embed_and_head(inv, vocab, hidden, tied)
    layers = []
    for i in range(num_layers):
        prefix = f"model.layers.{i}"
        inv.norm(f"{prefix}.input_layernorm", hidden, i)
        gqa_attention(inv, i, f"{prefix}.self_attn", hidden, heads, kv_heads, head_dim, qkv_bias=qkv_bias,
                      qk_norm=qk_norm)
        inv.norm(f"{prefix}.post_attention_layernorm", hidden, i)
        mlp: MlpKind
        if mixtral:
            router(inv, i, f"{prefix}.block_sparse_moe.gate", hidden, num_experts)
            routed_experts(inv, i, f"{prefix}.block_sparse_moe.experts", hidden, expert_width, num_experts,
                           gate="w1", up="w3", down="w2")
            mlp = MoeMlp(num_experts, top_k, expert_width)
        elif num_experts and _is_sparse(cfg, i):
            router(inv, i, f"{prefix}.mlp.gate", hidden, num_experts)
            routed_experts(inv, i, f"{prefix}.mlp.experts", hidden, expert_width, num_experts)
            if shared_width:
                gated_mlp(inv, i, f"{prefix}.mlp.shared_expert", hidden, shared_width, role=Role.SHARED_EXPERTS)
                inv.linear(f"{prefix}.mlp.shared_expert_gate", 1, hidden, Role.ROUTER, Split.REPLICATED, i,
                           quantizable=False)
            mlp = MoeMlp(num_experts, top_k, expert_width, 1 if shared_width else 0, shared_width)
        else:
            gated_mlp(inv, i, f"{prefix}.mlp", hidden, intermediate)
            mlp = DenseMlp(intermediate)
        layers.append(DecoderLayer(attention[i], mlp))
    inv.norm("model.norm", hidden, None)
    rot = rotary_dim(cfg, head_dim)
    max_pos = cfg.max_positions()
    return FamilyFacts(
        hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        intermediate_size=intermediate, vocab_size=vocab, max_position_embeddings=max_pos,
        tie_word_embeddings=tied, layers=layers, inventory=inv, rotary_dim=rot,
        rope_caches=((rope_cache_positions(cfg, max_pos), rot),),
    )


@family("mixtral")
def read_mixtral(cfg: Cfg) -> FamilyFacts:
    return _read(cfg, "mixtral")


@family("qwen2_moe")
def read_qwen2_moe(cfg: Cfg) -> FamilyFacts:
    return _read(cfg, "qwen2_moe")


@family("qwen3_moe")
def read_qwen3_moe(cfg: Cfg) -> FamilyFacts:
    return _read(cfg, "qwen3_moe")
