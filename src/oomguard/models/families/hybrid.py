"""Hybrid linear-attention models: Qwen3-Next (Gated DeltaNet layers between gated full-attention layers)."""

from __future__ import annotations

from oomguard.models.families.base import Cfg, FamilyFacts, Inventory, family
from oomguard.models.families.common import (
    STATE_DTYPE_AUTO,
    embed_and_head,
    gated_mlp,
    gqa_attention,
    rope_cache_positions,
    rotary_dim,
    routed_experts,
    router,
)
from oomguard.models.spec import (
    AttentionKind,
    DecoderLayer,
    FullAttention,
    MambaState,
    MoeMlp,
    Role,
    Split,
)

# NOTE: vLLM keeps linear-attention state in the model dtype ("auto") unless --mamba-ssm-cache-dtype says otherwise.
STATE_DTYPE = STATE_DTYPE_AUTO


def gated_deltanet_state(cfg: Cfg) -> MambaState:
    """Per-sequence state of one Gated DeltaNet layer: conv state (kernel - 1) x (2·nk·dk + nv·dv) channels and
    recurrent state nv x dk x dv; TP divides the channels and the value heads."""
    nk, nv = cfg.int("linear_num_key_heads"), cfg.int("linear_num_value_heads")
    dk, dv = cfg.int("linear_key_head_dim"), cfg.int("linear_value_head_dim")
    kernel = cfg.int("linear_conv_kernel_dim", 4)
    return MambaState(state_shapes=((kernel - 1, 2 * nk * dk + nv * dv), (nv, dk, dv)),
                      state_dtypes=(STATE_DTYPE, STATE_DTYPE), tp_split_dims=(1, 0))


@family("qwen3_next")
def read_qwen3_next(cfg: Cfg) -> FamilyFacts:
    hidden = cfg.int("hidden_size")
    num_layers = cfg.int("num_hidden_layers")
    heads = cfg.int("num_attention_heads")
    kv_heads = cfg.kv_heads()
    head_dim = cfg.head_dim()
    vocab = cfg.int("vocab_size")
    tied = cfg.bool("tie_word_embeddings", False)
    interval = cfg.int("full_attention_interval", 4)
    experts = cfg.int("num_experts")
    width = cfg.int("moe_intermediate_size")
    shared = cfg.int("shared_expert_intermediate_size", 0)
    nk, nv = cfg.int("linear_num_key_heads"), cfg.int("linear_num_value_heads")
    dk, dv = cfg.int("linear_key_head_dim"), cfg.int("linear_value_head_dim")
    kernel = cfg.int("linear_conv_kernel_dim", 4)
    state = gated_deltanet_state(cfg)
    inv = Inventory()
    embed_and_head(inv, vocab, hidden, tied)
    layers = []
    for i in range(num_layers):
        p = f"model.layers.{i}"
        inv.norm(f"{p}.input_layernorm", hidden, i)
        attention: AttentionKind
        if (i + 1) % interval == 0:
            # NOTE: gated attention: q_proj also emits the output gate, so it is twice as wide.
            gqa_attention(inv, i, f"{p}.self_attn", hidden, heads, kv_heads, head_dim, qk_norm=True,
                          q_multiplier=2)
            attention = FullAttention(kv_heads, head_dim, head_dim)
        else:
            la = f"{p}.linear_attn"
            inv.linear(f"{la}.in_proj_qkvz", 2 * nk * dk + 2 * nv * dv, hidden, Role.MAMBA, Split.COLUMN, i)
            inv.linear(f"{la}.in_proj_ba", 2 * nv, hidden, Role.MAMBA, Split.COLUMN, i)
            inv.add(f"{la}.conv1d.weight", (2 * nk * dk + nv * dv, 1, kernel), Role.MAMBA, Split.COLUMN, i,
                    quantizable=False)
            inv.add(f"{la}.dt_bias", (nv,), Role.MAMBA, Split.COLUMN, i, quantizable=False)
            inv.add(f"{la}.A_log", (nv,), Role.MAMBA, Split.COLUMN, i, quantizable=False)
            inv.norm(f"{la}.norm", dv, i, Role.MAMBA)
            inv.linear(f"{la}.out_proj", hidden, nv * dv, Role.MAMBA, Split.ROW, i)
            attention = state
        inv.norm(f"{p}.post_attention_layernorm", hidden, i)
        router(inv, i, f"{p}.mlp.gate", hidden, experts)
        routed_experts(inv, i, f"{p}.mlp.experts", hidden, width, experts)
        if shared:
            gated_mlp(inv, i, f"{p}.mlp.shared_expert", hidden, shared, role=Role.SHARED_EXPERTS)
            inv.linear(f"{p}.mlp.shared_expert_gate", 1, hidden, Role.ROUTER, Split.REPLICATED, i,
                       quantizable=False)
        layers.append(DecoderLayer(attention, MoeMlp(experts, cfg.int("num_experts_per_tok", 10), width,
                                                     1 if shared else 0, shared)))
    inv.norm("model.norm", hidden, None)
    rot = rotary_dim(cfg, head_dim)
    max_pos = cfg.max_positions()
    return FamilyFacts(
        hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        intermediate_size=cfg.int("intermediate_size", width), vocab_size=vocab, max_position_embeddings=max_pos,
        tie_word_embeddings=tied, layers=layers, inventory=inv, rotary_dim=rot,
        rope_caches=((rope_cache_positions(cfg, max_pos), rot),), mtp_layers=cfg.int("mtp_num_hidden_layers", 0),
    )
