"""What every engine's `engine.py` builds the neutral result from in the same way: the model's facts and the
KV pool's summary. The engines' own types meet here through the fields they share (Protocols), so neither
engine imports the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from oomguard.hardware import Gpu
from oomguard.host.ledger import HostLedger
from oomguard.kinds import Failure, Verdict
from oomguard.margin import Margin
from oomguard.models.spec import ModelSpec
from oomguard.result import EngineInfo, FixResult, KvGroupInfo, KvSummary, ModelInfo, PlanResult, RankResult


class PoolGroup(Protocol):
    """One group of layers in an engine's KV pool (vLLM's KvGroup, SGLang's PoolGroup)."""

    @property
    def kind(self) -> str: ...
    @property
    def num_layers(self) -> int: ...
    @property
    def block_size(self) -> int: ...
    @property
    def sliding_window(self) -> int | None: ...
    @property
    def page_bytes(self) -> int: ...
    @property
    def padding_layers(self) -> int: ...


class Pool(Protocol):
    """An engine's KV pool as planned (vLLM's KvPlan, SGLang's SglangKv)."""

    @property
    def num_gpu_blocks(self) -> int: ...
    @property
    def block_size(self) -> int: ...
    @property
    def bytes_per_block(self) -> int: ...
    @property
    def kv_cache_tokens(self) -> int: ...
    @property
    def max_concurrency(self) -> float: ...
    @property
    def groups(self) -> Sequence[PoolGroup]: ...
    @property
    def blocks_per_request(self) -> int: ...


def model_info(model: ModelSpec, dtype: str) -> ModelInfo:
    """The model as every result shows it, with the dtype the engine resolved."""
    return ModelInfo(
        name=model.name,
        architecture=model.architecture,
        params=model.num_params,
        dtype=dtype,
        quantization=model.quantization.method if model.quantization else None,
        max_position_embeddings=model.max_position_embeddings,
        weights_source=model.weights_source,
    )


def kv_summary(pool: Pool) -> KvSummary:
    return KvSummary(
        num_blocks=pool.num_gpu_blocks,
        block_size=pool.block_size,
        bytes_per_block=pool.bytes_per_block,
        tokens=pool.kv_cache_tokens,
        max_concurrency=pool.max_concurrency,
        groups=tuple(
            KvGroupInfo(g.kind, g.num_layers, g.block_size, g.sliding_window, g.page_bytes, g.padding_layers)
            for g in pool.groups
        ),
        blocks_per_request=pool.blocks_per_request,
    )


class EnginePlan(Protocol):
    """What every engine's own plan type holds besides its engine-specific config and ranks (vLLM's Plan,
    SGLang's SglangPlan)."""

    @property
    def model(self) -> ModelSpec: ...
    @property
    def gpu(self) -> Gpu: ...
    @property
    def kv(self) -> Pool: ...
    @property
    def verdict(self) -> Verdict: ...
    @property
    def margin(self) -> Margin | None: ...
    @property
    def failure(self) -> Failure | None: ...
    @property
    def errors(self) -> tuple[str, ...]: ...
    @property
    def warnings(self) -> tuple[str, ...]: ...
    @property
    def notes(self) -> tuple[str, ...]: ...


def plan_result(
    plan: EnginePlan,
    *,
    engine: EngineInfo,
    dtype: str,
    ranks: tuple[RankResult, ...],
    fixes: tuple[FixResult, ...],
    longest_request: int,
    concurrency_at_length: tuple[tuple[int, float], ...],
    log_lines: Sequence[str],
    host: HostLedger | None = None,
) -> PlanResult:
    """The neutral result: the engine supplies what only it knows (its settings, ranks, lengths, log
    lines); the verdict, failure and messages pass through as the engine's planner decided them."""
    return PlanResult(
        engine=engine,
        model=model_info(plan.model, dtype),
        gpu=plan.gpu,
        verdict=plan.verdict,
        margin=plan.margin,
        failure=plan.failure,
        errors=plan.errors,
        warnings=plan.warnings,
        notes=plan.notes,
        ranks=ranks,
        kv=kv_summary(plan.kv),
        fixes=fixes,
        longest_request=longest_request,
        concurrency_at_length=concurrency_at_length,
        log_lines=tuple(log_lines),
        host=host,
    )
