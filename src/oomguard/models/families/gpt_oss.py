"""gpt-oss-20b/120b: alternating 128-token sliding window and full attention, learned attention sinks,
biases everywhere, MXFP4 routed experts stored as `_blocks` + `_scales` with bf16 biases."""

from __future__ import annotations

from oomguard.models.families.base import Cfg, FamilyFacts, Inventory, decoder_shape, family
from oomguard.models.families.common import (
    attention_from_layer_type,
    embed_and_head,
    fused_experts,
    layer_types,
    local_global_types,
    pre_norm_attention,
    router,
    single_rope_cache,
)
from oomguard.models.spec import DecoderLayer, MoeMlp

GPT_OSS_WINDOW = 128  # transformers GptOssConfig.sliding_window default


@family("gpt_oss")
def read_gpt_oss(cfg: Cfg) -> FamilyFacts:
    shape = decoder_shape(cfg, tied_default=False)
    hidden, width, num_layers = shape.hidden_size, shape.intermediate_size, shape.num_hidden_layers
    experts = cfg.int("num_local_experts")
    top_k = cfg.int("num_experts_per_tok", cfg.int("experts_per_token", 4))
    window = cfg.int("sliding_window", GPT_OSS_WINDOW)
    # NOTE: older configs lack layer_types; the model alternates starting with a sliding layer.
    types = layer_types(cfg, num_layers) or local_global_types(num_layers, 2)
    inv = Inventory()
    embed_and_head(inv, shape)
    layers = []
    for i in range(num_layers):
        p = f"model.layers.{i}"
        # NOTE: one learned sink logit per head, sharded with the heads.
        pre_norm_attention(inv, i, p, shape, qkv_bias=True, o_bias=True, sinks=True)
        router(inv, i, f"{p}.mlp.router", hidden, experts, bias=True)
        fused_experts(inv, i, f"{p}.mlp.experts", hidden, width, experts, bias=True)
        layers.append(
            DecoderLayer(
                attention_from_layer_type(types[i], shape.num_key_value_heads, shape.head_dim, window),
                MoeMlp(experts, top_k, width),
            )
        )
    inv.norm("model.norm", hidden, None)
    return FamilyFacts(
        shape,
        layers,
        inv,
        rotary_dim=shape.head_dim,
        rope_caches=single_rope_cache(cfg, shape, shape.head_dim),
    )
