"""Speculative decoding: what the drafter adds on the rank that runs it (the last PP stage).

vLLM runs the drafter's attention layers against the same KV pool, so its layers join the KV groups
(Llama-3.1-8B + EAGLE = 33 layers), and loads its weights next to the target's:
- MTP heads shipped in the checkpoint (DeepSeek, GLM-4.5, Qwen3-Next `mtp.*`): their tensors are in the
  model's inventory (Role.MTP) and are loaded; one KV layer per MTP layer;
- EAGLE / EAGLE-3: a separate one-layer drafter with the target's attention shape; its weights are estimated
  from that shape (one decoder layer + the fc that fuses hidden states; EAGLE-3 also a 32k-row draft head);
- n-gram / suffix decoding: no model, no memory;
- a separate draft model: not modelled here (plan it on its own; a note says so).
"""

from __future__ import annotations

from dataclasses import dataclass

from oomguard.engines.vllm.config import EngineConfig
from oomguard.models.spec import (
    AttentionKind,
    DenseMlp,
    FullAttention,
    MlaAttention,
    ModelSpec,
)

MTP_METHODS = frozenset(
    {"mtp", "deepseek_mtp", "qwen3_next_mtp", "glm4_moe_mtp", "ernie_mtp", "mimo_mtp", "longcat_flash_mtp"}
)
EAGLE_METHODS = frozenset({"eagle", "eagle3"})
MODEL_FREE_METHODS = frozenset({"ngram", "suffix", "ngram_gpu"})
# EAGLE-3 drafters predict over a reduced vocabulary (draft_vocab_size 32000 in the published drafters).
EAGLE3_DRAFT_VOCAB = 32000


@dataclass(frozen=True)
class Drafter:
    kv_layers: tuple[AttentionKind, ...]
    extra_weight_bytes: int  # weights not in the target's inventory (EAGLE); MTP weights are in it
    loads_mtp: bool
    note: str


def _target_attention(spec: ModelSpec) -> AttentionKind:
    """The drafter attends like the target's full-attention layers."""
    for layer in spec.layers:
        if isinstance(layer.attention, (FullAttention, MlaAttention)):
            return layer.attention
    return FullAttention(spec.num_key_value_heads, spec.head_dim, spec.head_dim)


def _one_layer_bytes(spec: ModelSpec, cfg: EngineConfig) -> int:
    h, dt = spec.hidden_size, 2
    q = spec.num_attention_heads * spec.head_dim
    kv = spec.num_key_value_heads * spec.head_dim
    inter = next(
        (layer.mlp.intermediate_size for layer in spec.layers if isinstance(layer.mlp, DenseMlp)),
        spec.intermediate_size,
    )
    tp = cfg.tensor_parallel_size
    return int((h * (q + 2 * kv) + q * h + 3 * h * inter) * dt / tp)


def drafter_for(spec: ModelSpec, cfg: EngineConfig) -> Drafter | None:
    method = (cfg.speculative_method or "").lower()
    if not method or cfg.num_speculative_tokens <= 0 and method not in EAGLE_METHODS | MTP_METHODS:
        return None
    if method in MODEL_FREE_METHODS:
        return Drafter((), 0, False, f"{method} speculation: no draft model, no extra memory")
    if method in MTP_METHODS:
        layers = max(1, spec.mtp_layers)
        return Drafter(
            (_target_attention(spec),) * layers,
            0,
            True,
            f"{method}: {layers} MTP layer(s) from the checkpoint join the KV groups and are loaded",
        )
    if method in EAGLE_METHODS:
        h = spec.hidden_size
        fuse = (3 if method == "eagle3" else 2) * h * h * 2 // cfg.tensor_parallel_size
        head = EAGLE3_DRAFT_VOCAB * h * 2 // cfg.tensor_parallel_size if method == "eagle3" else 0
        return Drafter(
            (_target_attention(spec),),
            _one_layer_bytes(spec, cfg) + fuse + head,
            False,
            f"{method} drafter: one decoder layer of the target's shape (weights estimated) and one KV layer",
        )
    return Drafter(
        (),
        0,
        False,
        f"speculative model {method!r}: a separate draft model is not modelled; plan it "
        "on its own and add its weights and KV layers",
    )
