"""Which ranks exist and what each holds: PP stages (layers, embedding, lm_head), TP shards, EP experts.

vLLM's workers differ only along PP (layers per stage; the first holds the embedding, the last the
lm_head, final norm and sampler) and, with expert parallelism, in how many experts they hold when the
expert count does not divide. Distinct ranks are the distinct combinations; the ledger keeps one per kind.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from oomguard.engines.vllm.config import EngineConfig
from oomguard.errors import ParallelismError
from oomguard.models.spec import ModelSpec
from oomguard.models.weights import pp_layer_range

# Quantized checkpoints and fused kernels need whole 64-row vocab shards (VocabParallelEmbedding pads to 64).
VOCAB_PADDING = 64


@dataclass(frozen=True)
class RankPlacement:
    """One distinct worker: its PP stage and what it holds."""

    pp_rank: int
    layer_start: int
    layer_end: int
    holds_embedding: bool
    holds_lm_head: bool
    tp_size: int
    ep_size: int
    ep_rank: int
    num_physical_experts: int

    @property
    def layer_indices(self) -> range:
        return range(self.layer_start, self.layer_end)

    @property
    def num_layers(self) -> int:
        return self.layer_end - self.layer_start

    @property
    def label(self) -> str:
        parts = []
        if self.layer_end - self.layer_start >= 0:
            parts.append(f"PP stage {self.pp_rank} (layers {self.layer_start}-{self.layer_end - 1})")
        if self.ep_size > 1:
            parts.append(f"EP rank {self.ep_rank}")
        return ", ".join(parts) if parts else "every rank"


def pp_partition(num_layers: int, pp: int, env: Mapping[str, str] | None = None) -> list[int]:
    """get_pp_indices: layers // PP per stage, the remainder to stages -2, -3, ...; VLLM_PP_LAYER_PARTITION
    overrides ("16,32")."""
    override = (env or {}).get("VLLM_PP_LAYER_PARTITION") or os.environ.get("OOMGUARD_PP_LAYER_PARTITION")
    if override:
        try:
            parts = [int(p) for p in override.split(",")]
        except ValueError:
            raise ParallelismError(
                f"VLLM_PP_LAYER_PARTITION={override!r} is not a comma-separated list of integers"
            ) from None
        if len(parts) != pp or sum(parts) != num_layers:
            raise ParallelismError(
                f"VLLM_PP_LAYER_PARTITION={override!r} must have {pp} entries summing to {num_layers} layers"
            )
        return parts
    return [len(pp_layer_range(num_layers, pp, rank)) for rank in range(pp)]


def padded_vocab_size(vocab_size: int) -> int:
    """VocabParallelEmbedding / ParallelLMHead pad the vocabulary to a multiple of 64 rows."""
    return -(-vocab_size // VOCAB_PADDING) * VOCAB_PADDING


def validate_parallelism(spec: ModelSpec, cfg: EngineConfig) -> None:
    """The layouts vLLM itself refuses, with its reason."""
    tp, pp = cfg.tensor_parallel_size, cfg.pipeline_parallel_size
    padded_vocab = padded_vocab_size(spec.vocab_size)
    if padded_vocab % tp:
        raise ParallelismError(
            f"--tensor-parallel-size {tp} does not divide the padded vocabulary ({padded_vocab:,} rows); "
            "vLLM fails "
            f"with 'AssertionError: {padded_vocab} is not divisible by {tp}'"
        )
    if spec.num_attention_heads % tp:
        raise ParallelismError(
            f"--tensor-parallel-size {tp} does not divide the model's {spec.num_attention_heads} attention "
            "heads "
            f"(vLLM: 'Total number of attention heads ({spec.num_attention_heads}) must be divisible by "
            "tensor "
            f"parallel size ({tp})'); use one of "
            f"{', '.join(str(d) for d in _divisors(spec.num_attention_heads) if d <= 16)}"
        )
    kv = spec.num_key_value_heads
    if kv and kv > tp and kv % tp:
        raise ParallelismError(
            f"--tensor-parallel-size {tp} does not divide the model's {kv} KV heads (vLLM requires TP to "
            "divide "
            "the KV heads, or the KV heads to divide TP)"
        )
    if kv and tp > kv and tp % kv and not spec.uses_mla:
        raise ParallelismError(
            f"--tensor-parallel-size {tp} is not a multiple of the model's {kv} KV heads (vLLM replicates KV "
            "heads "
            "only when TP is a multiple of them)"
        )
    if pp > spec.num_hidden_layers:
        raise ParallelismError(
            f"--pipeline-parallel-size {pp} exceeds the model's {spec.num_hidden_layers} layers"
        )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def distinct_ranks(spec: ModelSpec, cfg: EngineConfig) -> list[RankPlacement]:
    """One placement per distinct kind of worker (PP stage x EP expert count); [0] is the one whose numbers
    vLLM's engine-level log lines print (rank 0: PP stage 0, EP rank 0)."""
    validate_parallelism(spec, cfg)
    parts = pp_partition(spec.num_hidden_layers, cfg.pipeline_parallel_size, cfg.env)
    moe = spec.moe
    ep = cfg.expert_parallel_size if moe is not None else 1
    physical = (moe.num_experts + cfg.num_redundant_experts) if moe is not None else 0
    if moe is not None and ep > physical:
        raise ParallelismError(f"expert-parallel size {ep} (TP x DP) exceeds the model's {physical} experts")
    ep_ranks = [0] if ep == 1 else sorted({0, ep - 1})  # first ranks hold +1 expert when E % EP != 0
    placements: list[RankPlacement] = []
    start = 0
    for stage, count in enumerate(parts):
        for ep_rank in ep_ranks:
            placements.append(
                RankPlacement(
                    pp_rank=stage,
                    layer_start=start,
                    layer_end=start + count,
                    holds_embedding=stage == 0,
                    holds_lm_head=stage == len(parts) - 1,
                    tp_size=cfg.tensor_parallel_size,
                    ep_size=ep,
                    ep_rank=ep_rank,
                    num_physical_experts=physical,
                )
            )
        start += count
    # Keep only EP ranks that differ (E divisible by EP makes them identical).
    if ep > 1 and physical % ep == 0:
        placements = [p for p in placements if p.ep_rank == 0]
    return placements
