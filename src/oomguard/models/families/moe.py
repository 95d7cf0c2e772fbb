"""Llama-shaped mixture-of-experts decoders: Mixtral, Qwen1.5/Qwen2-MoE (shared expert + its gate),
Qwen3-MoE."""

from __future__ import annotations

from oomguard.models.families.base import Cfg, FamilyFacts, Inventory, decoder_shape, family
from oomguard.models.families.common import (
    embed_and_head,
    gated_mlp,
    pre_norm_attention,
    qwen_moe_block,
    rotary_dim,
    routed_experts,
    router,
    single_rope_cache,
)
from oomguard.models.families.llama import sliding_pattern
from oomguard.models.spec import DecoderLayer, DenseMlp, MlpKind, MoeMlp


def _is_sparse(cfg: Cfg, layer: int) -> bool:
    """Qwen2/3-MoE: a layer is MoE unless listed in mlp_only_layers or off the decoder_sparse_step beat."""
    only_dense = set(cfg.list("mlp_only_layers") or [])
    step = cfg.int("decoder_sparse_step", 1)
    return layer not in only_dense and step > 0 and (layer + 1) % step == 0


def _read(cfg: Cfg, model_type: str) -> FamilyFacts:
    shape = decoder_shape(cfg, tied_default=False)
    hidden, intermediate = shape.hidden_size, shape.intermediate_size
    mixtral = model_type == "mixtral"
    num_experts = cfg.int("num_local_experts") if mixtral else cfg.int("num_experts")
    top_k = cfg.int("num_experts_per_tok", 2)
    # NOTE: Mixtral has no moe_intermediate_size: each expert is intermediate_size wide.
    expert_width = intermediate if mixtral else cfg.int("moe_intermediate_size")
    shared_width = cfg.int("shared_expert_intermediate_size", 0) if model_type == "qwen2_moe" else 0
    # NOTE: Qwen2-MoE always has q/k/v biases (no o bias); Qwen3-MoE normalizes q and k per head instead.
    qkv_bias = model_type == "qwen2_moe" or cfg.bool("attention_bias", False)
    qk_norm = model_type == "qwen3_moe"
    attention = sliding_pattern(cfg, "mistral" if mixtral else "qwen2", shape)

    inv = Inventory()
    embed_and_head(inv, shape)
    layers = []
    for i in range(shape.num_hidden_layers):
        prefix = f"model.layers.{i}"
        pre_norm_attention(inv, i, prefix, shape, qkv_bias=qkv_bias, qk_norm=qk_norm)
        mlp: MlpKind
        if mixtral:
            # NOTE: Mixtral's MoE lives in `block_sparse_moe` with experts named w1 (gate), w3 (up), w2
            # (down).
            router(inv, i, f"{prefix}.block_sparse_moe.gate", hidden, num_experts)
            routed_experts(
                inv,
                i,
                f"{prefix}.block_sparse_moe.experts",
                hidden,
                expert_width,
                num_experts,
                gate="w1",
                up="w3",
                down="w2",
            )
            mlp = MoeMlp(num_experts, top_k, expert_width)
        elif num_experts and _is_sparse(cfg, i):
            mlp = qwen_moe_block(
                inv, i, f"{prefix}.mlp", hidden, num_experts, top_k, expert_width, shared_width
            )
        else:
            gated_mlp(inv, i, f"{prefix}.mlp", hidden, intermediate)
            mlp = DenseMlp(intermediate)
        layers.append(DecoderLayer(attention[i], mlp))
    inv.norm("model.norm", hidden, None)
    rot = rotary_dim(cfg, shape.head_dim)
    return FamilyFacts(shape, layers, inv, rotary_dim=rot, rope_caches=single_rope_cache(cfg, shape, rot))


@family("mixtral")
def read_mixtral(cfg: Cfg) -> FamilyFacts:
    return _read(cfg, "mixtral")


@family("qwen2_moe")
def read_qwen2_moe(cfg: Cfg) -> FamilyFacts:
    return _read(cfg, "qwen2_moe")


@family("qwen3_moe")
def read_qwen3_moe(cfg: Cfg) -> FamilyFacts:
    return _read(cfg, "qwen3_moe")
