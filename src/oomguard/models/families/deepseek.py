"""DeepSeek-V2/V2-Lite/V3/R1 and Kimi-K2 (MLA + MoE), GLM-4.5 (GQA + the same MoE layout) and DeepSeek-MoE
v1 (deepseek: plain multi-head attention + the same MoE layout, no score bias).

Shared layout: the first `first_k_dense_replace` layers have a dense MLP, the rest a router (with a score
correction bias on V3/GLM), routed experts and `n_shared_experts` always-on experts fused into one MLP of
n_shared x moe_intermediate_size. `num_nextn_predict_layers` MTP blocks follow the main layers in the
checkpoint (layer index num_hidden_layers ...): listed as Role.MTP, loaded only for MTP speculative decoding.
"""

from __future__ import annotations

from dataclasses import replace

from oomguard.models.families.base import Cfg, DecoderShape, FamilyFacts, Inventory, decoder_shape, family
from oomguard.models.families.common import (
    embed_and_head,
    full_attention,
    gated_mlp,
    gqa_attention,
    rotary_dim,
    routed_experts,
    router,
    single_rope_cache,
)
from oomguard.models.spec import (
    AttentionKind,
    DecoderLayer,
    DenseMlp,
    MlaAttention,
    MlpKind,
    MoeMlp,
    Role,
    Split,
    TensorSpec,
)


def _mla_attention(inv: Inventory, cfg: Cfg, layer: int, prefix: str, hidden: int, heads: int) -> None:
    """MLA projections. NOTE: V2-Lite has q_lora_rank null: a plain q_proj instead of q_a/q_b."""
    q_lora = cfg.opt_int("q_lora_rank")
    kv_lora = cfg.int("kv_lora_rank")
    nope, rope, v_dim = cfg.int("qk_nope_head_dim"), cfg.int("qk_rope_head_dim"), cfg.int("v_head_dim")
    if q_lora:
        inv.linear(f"{prefix}.q_a_proj", q_lora, hidden, Role.ATTENTION, Split.REPLICATED, layer)
        inv.norm(f"{prefix}.q_a_layernorm", q_lora, layer, Role.ATTENTION)
        inv.linear(f"{prefix}.q_b_proj", heads * (nope + rope), q_lora, Role.ATTENTION, Split.COLUMN, layer)
    else:
        inv.linear(f"{prefix}.q_proj", heads * (nope + rope), hidden, Role.ATTENTION, Split.COLUMN, layer)
    inv.linear(
        f"{prefix}.kv_a_proj_with_mqa", kv_lora + rope, hidden, Role.ATTENTION, Split.REPLICATED, layer
    )
    inv.norm(f"{prefix}.kv_a_layernorm", kv_lora, layer, Role.ATTENTION)
    inv.linear(f"{prefix}.kv_b_proj", heads * (nope + v_dim), kv_lora, Role.ATTENTION, Split.COLUMN, layer)
    inv.linear(f"{prefix}.o_proj", hidden, heads * v_dim, Role.ATTENTION, Split.ROW, layer)


# Attention flavours of the shared layout.
MLA, GQA_BIASED, MHA = "mla", "gqa_biased", "mha"


def _mla_head_dim(cfg: Cfg) -> int:
    """NOTE: an MLA head is qk_nope + qk_rope wide (what the planner calls head_dim); no head_dim key
    applies."""
    return cfg.int("qk_nope_head_dim") + cfg.int("qk_rope_head_dim")


class _Layout:
    """The per-layer layout the three flavours share: which layers are MoE and what each block holds."""

    def __init__(self, cfg: Cfg, attention: str, shape: DecoderShape) -> None:
        self.attention = attention
        self.shape = shape
        self.num_experts = cfg.int("n_routed_experts", 0)
        self.top_k = cfg.int("num_experts_per_tok", 1)
        self.expert_width = cfg.int("moe_intermediate_size", shape.intermediate_size)
        self.shared = cfg.int("n_shared_experts", 0)
        self.first_dense = cfg.int("first_k_dense_replace", 0)
        self.freq = cfg.int("moe_layer_freq", 1)
        # NOTE: V3/R1/Kimi/GLM route with sigmoid scores plus a learned correction bias (topk_method
        # noaux_tc).
        self.score_bias = attention == GQA_BIASED or cfg.str("topk_method") == "noaux_tc"

    def is_moe(self, layer: int) -> bool:
        return bool(self.num_experts) and layer >= self.first_dense and layer % max(1, self.freq) == 0

    def layer(self, inv: Inventory, cfg: Cfg, i: int, role: Role | None = None) -> MlpKind:
        h = self.shape.hidden_size
        p = f"model.layers.{i}"
        start = len(inv.tensors)
        inv.norm(f"{p}.input_layernorm", h, i)
        if self.attention == GQA_BIASED:
            gqa_attention(
                inv,
                i,
                f"{p}.self_attn",
                self.shape,
                qkv_bias=cfg.bool("attention_bias", True),
                qk_norm=cfg.bool("use_qk_norm", False),
            )
        elif self.attention == MHA:
            bias = cfg.bool("attention_bias", False)
            gqa_attention(inv, i, f"{p}.self_attn", self.shape, qkv_bias=bias, o_bias=bias)
        else:
            _mla_attention(inv, cfg, i, f"{p}.self_attn", h, self.shape.num_attention_heads)
        inv.norm(f"{p}.post_attention_layernorm", h, i)
        mlp: MlpKind
        if self.is_moe(i):
            router(inv, i, f"{p}.mlp.gate", h, self.num_experts, score_bias=self.score_bias)
            routed_experts(inv, i, f"{p}.mlp.experts", h, self.expert_width, self.num_experts)
            if self.shared:
                # NOTE: the n_shared_experts always-on experts are stored fused as one MLP n_shared x wide.
                gated_mlp(
                    inv,
                    i,
                    f"{p}.mlp.shared_experts",
                    h,
                    self.expert_width * self.shared,
                    role=Role.SHARED_EXPERTS,
                )
            mlp = MoeMlp(
                self.num_experts, self.top_k, self.expert_width, self.shared, self.expert_width * self.shared
            )
        else:
            gated_mlp(inv, i, f"{p}.mlp", h, self.shape.intermediate_size)
            mlp = DenseMlp(self.shape.intermediate_size)
        if role is not None:
            inv.tensors[start:] = [_as_role(t, role) for t in inv.tensors[start:]]
        return mlp


def _as_role(tensor: TensorSpec, role: Role) -> TensorSpec:
    return replace(tensor, role=role)


def _mtp_block(inv: Inventory, layout: _Layout, cfg: Cfg, index: int) -> None:
    """One MTP block: embedding/hidden norms, the 2H -> H projection, a full decoder layer and its own
    head (DeepSeek-V3 stores separate embed_tokens and shared_head copies inside the block)."""
    h, vocab = layout.shape.hidden_size, layout.shape.vocab_size
    p = f"model.layers.{index}"
    start = len(inv.tensors)
    inv.embedding(f"{p}.embed_tokens.weight", vocab, h, Role.MTP)
    inv.norm(f"{p}.enorm", h, index, Role.MTP)
    inv.norm(f"{p}.hnorm", h, index, Role.MTP)
    inv.linear(f"{p}.eh_proj", h, 2 * h, Role.MTP, Split.COLUMN, index)
    layout.layer(inv, cfg, index, role=Role.MTP)
    inv.norm(f"{p}.shared_head.norm", h, index, Role.MTP)
    inv.embedding(f"{p}.shared_head.head.weight", vocab, h, Role.MTP)
    inv.tensors[start:] = [_as_role(t, Role.MTP) for t in inv.tensors[start:]]


def _read(cfg: Cfg, flavour: str) -> FamilyFacts:
    mla = flavour == MLA
    shape = decoder_shape(cfg, tied_default=False, head_dim=_mla_head_dim if mla else Cfg.head_dim)
    layout = _Layout(cfg, flavour, shape)
    inv = Inventory()
    embed_and_head(inv, shape)
    attention: AttentionKind
    if mla:
        attention = MlaAttention(cfg.int("kv_lora_rank"), cfg.int("qk_rope_head_dim"))
        rot = cfg.int("qk_rope_head_dim")
    else:
        attention = full_attention(shape)
        rot = rotary_dim(cfg, shape.head_dim)
    layers = [DecoderLayer(attention, layout.layer(inv, cfg, i)) for i in range(shape.num_hidden_layers)]
    inv.norm("model.norm", shape.hidden_size, None)
    mtp = cfg.int("num_nextn_predict_layers", 0)
    for k in range(mtp):
        _mtp_block(inv, layout, cfg, shape.num_hidden_layers + k)
    rope_caches = single_rope_cache(cfg, shape, rot)
    if mla:
        # NOTE: MLA has no KV heads of its own (one latent serves every head): one per attention head, as
        # DeepSeek's own configs spell it.
        shape = replace(shape, num_key_value_heads=shape.num_attention_heads)
    return FamilyFacts(shape, layers, inv, rotary_dim=rot, rope_caches=rope_caches, mtp_layers=mtp)


@family("deepseek_v2", "deepseek_v3", "kimi_k2")
def read_deepseek(cfg: Cfg) -> FamilyFacts:
    return _read(cfg, MLA)


@family("glm4_moe")
def read_glm4_moe(cfg: Cfg) -> FamilyFacts:
    return _read(cfg, GQA_BIASED)


@family("deepseek")
def read_deepseek_moe_v1(cfg: Cfg) -> FamilyFacts:
    """NOTE: deepseek-moe-16b: MHA (kv heads = heads), layer 0 dense, softmax routing without a score bias."""
    return _read(cfg, MHA)
