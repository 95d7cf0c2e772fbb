"""Hybrid linear-attention models: Qwen3-Next (Gated DeltaNet layers between gated full-attention layers)."""

from __future__ import annotations

from dataclasses import replace

from oomguard.models.families.base import Cfg, FamilyFacts, Inventory, decoder_shape, family
from oomguard.models.families.common import (
    STATE_DTYPE_AUTO,
    embed_and_head,
    full_attention,
    gqa_attention,
    qwen_moe_block,
    rotary_dim,
    single_rope_cache,
)
from oomguard.models.spec import AttentionKind, DecoderLayer, MambaState, Role, Split

# NOTE: vLLM keeps linear-attention state in the model dtype ("auto") unless --mamba-ssm-cache-dtype says
# otherwise.
STATE_DTYPE = STATE_DTYPE_AUTO
QWEN3_NEXT_TOP_K = 10  # transformers Qwen3NextConfig.num_experts_per_tok default


def gated_deltanet_state(cfg: Cfg) -> MambaState:
    """Per-sequence state of one Gated DeltaNet layer: conv state (kernel - 1) x (2·nk·dk + nv·dv) channels
    and
    recurrent state nv x dk x dv; TP divides the channels and the value heads."""
    nk, nv = cfg.int("linear_num_key_heads"), cfg.int("linear_num_value_heads")
    dk, dv = cfg.int("linear_key_head_dim"), cfg.int("linear_value_head_dim")
    kernel = cfg.int("linear_conv_kernel_dim", 4)
    return MambaState(
        state_shapes=((kernel - 1, 2 * nk * dk + nv * dv), (nv, dk, dv)),
        state_dtypes=(STATE_DTYPE, STATE_DTYPE),
        tp_split_dims=(1, 0),
    )


def gated_deltanet_mixer(inv: Inventory, cfg: Cfg, layer: int, prefix: str, hidden: int) -> None:
    """Gated DeltaNet weights: in_proj_qkvz (q, k, v and the output gate z), in_proj_ba (beta and alpha per
    value
    head), a depthwise conv over q/k/v, per-head dt_bias and A_log, a gated RMSNorm over dv, out_proj."""
    nk, nv = cfg.int("linear_num_key_heads"), cfg.int("linear_num_value_heads")
    dk, dv = cfg.int("linear_key_head_dim"), cfg.int("linear_value_head_dim")
    kernel = cfg.int("linear_conv_kernel_dim", 4)
    inv.linear(f"{prefix}.in_proj_qkvz", 2 * nk * dk + 2 * nv * dv, hidden, Role.MAMBA, Split.COLUMN, layer)
    inv.linear(f"{prefix}.in_proj_ba", 2 * nv, hidden, Role.MAMBA, Split.COLUMN, layer)
    inv.add(
        f"{prefix}.conv1d.weight",
        (2 * nk * dk + nv * dv, 1, kernel),
        Role.MAMBA,
        Split.COLUMN,
        layer,
        quantizable=False,
    )
    inv.add(f"{prefix}.dt_bias", (nv,), Role.MAMBA, Split.COLUMN, layer, quantizable=False)
    inv.add(f"{prefix}.A_log", (nv,), Role.MAMBA, Split.COLUMN, layer, quantizable=False)
    inv.norm(f"{prefix}.norm", dv, layer, Role.MAMBA)
    inv.linear(f"{prefix}.out_proj", hidden, nv * dv, Role.MAMBA, Split.ROW, layer)


@family("qwen3_next")
def read_qwen3_next(cfg: Cfg) -> FamilyFacts:
    shape = decoder_shape(cfg, tied_default=False, intermediate=False)
    hidden = shape.hidden_size
    interval = cfg.int("full_attention_interval", 4)
    experts = cfg.int("num_experts")
    width = cfg.int("moe_intermediate_size")
    shared = cfg.int("shared_expert_intermediate_size", 0)
    state = gated_deltanet_state(cfg)
    inv = Inventory()
    embed_and_head(inv, shape)
    layers = []
    for i in range(shape.num_hidden_layers):
        p = f"model.layers.{i}"
        inv.norm(f"{p}.input_layernorm", hidden, i)
        attention: AttentionKind
        if (i + 1) % interval == 0:
            # NOTE: gated attention: q_proj also emits the output gate, so it is twice as wide.
            gqa_attention(inv, i, f"{p}.self_attn", shape, qk_norm=True, q_multiplier=2)
            attention = full_attention(shape)
        else:
            gated_deltanet_mixer(inv, cfg, i, f"{p}.linear_attn", hidden)
            attention = state
        inv.norm(f"{p}.post_attention_layernorm", hidden, i)
        mlp = qwen_moe_block(
            inv,
            i,
            f"{p}.mlp",
            hidden,
            experts,
            cfg.int("num_experts_per_tok", QWEN3_NEXT_TOP_K),
            width,
            shared,
        )
        layers.append(DecoderLayer(attention, mlp))
    inv.norm("model.norm", hidden, None)
    rot = rotary_dim(cfg, shape.head_dim)
    # NOTE: no dense layers: intermediate_size, when given, is what a dense MLP would be; else the expert
    # width.
    shape = replace(shape, intermediate_size=cfg.int("intermediate_size", width))
    return FamilyFacts(
        shape,
        layers,
        inv,
        rotary_dim=rot,
        rope_caches=single_rope_cache(cfg, shape, rot),
        mtp_layers=cfg.int("mtp_num_hidden_layers", 0),
    )
