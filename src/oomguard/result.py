"""The engine-neutral plan result: what every engine's planner ends in, and all that renderers, `check`, the
Python API and other commands read.

An engine keeps its rich internal types (vLLM's `Plan`, SGLang's `SglangPlan`) and converts them here once.
Settings keep the engine's own names (`gpu_memory_utilization` for vLLM, `mem_fraction_static` for SGLang),
each with why it has its value; nothing here is named after one engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from oomguard.hardware import Gpu
from oomguard.host.ledger import HostLedger
from oomguard.kinds import Failure, Provenance, Verdict
from oomguard.ledger import Estimate, GpuLedger
from oomguard.margin import Margin


@dataclass(frozen=True)
class Setting:
    """One resolved engine setting, under the engine's own name; `why` when the engine derived it."""

    name: str
    value: Any
    why: str | None = None


@dataclass(frozen=True)
class EngineInfo:
    """Which engine, which version of its rules, and its settings."""

    name: str  # "vllm", "sglang": the key of `engines/<name>/`
    display_name: str  # "vLLM", "SGLang"
    version: str
    settings: tuple[Setting, ...]
    headline: tuple[str, ...]  # the few settings a reader wants first ("TP 2", "max_model_len 32,768" ...)
    request_length: int  # tokens one request may hold (vLLM max_model_len, SGLang context_length)
    total_gpus: int
    world_size: int  # GPUs of one replica (TP x PP)
    unknown_flags: tuple[str, ...] = ()
    # Why each derived setting has its value, in the order the engine resolved them.
    defaults: Mapping[str, str] = field(default_factory=dict)
    # Keys this engine's JSON `engine` object carried before the neutral shape, kept for compatibility.
    legacy_json: Mapping[str, Any] = field(default_factory=dict)

    def setting(self, name: str) -> Any:
        for s in self.settings:
            if s.name == name:
                return s.value
        raise KeyError(name)


@dataclass(frozen=True)
class ModelInfo:
    name: str
    architecture: str
    params: int
    dtype: str
    quantization: str | None
    max_position_embeddings: int
    weights_source: str


@dataclass(frozen=True)
class RankResult:
    """One distinct rank's ledger (a PP stage / EP rank): the terms the engine subtracts, the KV pool."""

    label: str
    pp_rank: int
    layers: tuple[int, int]  # [start, end)
    ep_rank: int
    budget_bytes: int
    budget_label: str  # how the engine defines its budget ("budget: ceil(0.92 x total)")
    budget_kind: Provenance
    weights: Estimate
    activation: Estimate
    non_torch: Estimate
    comm_buffers: Estimate
    cuda_graphs: Estimate
    context_bytes: int
    available_kv_bytes: int  # what the engine reports as available for KV
    kv_cache_bytes: int  # what the pool allocates
    num_blocks: int
    bytes_per_block: int
    pool_label: str  # the KV line's count ("28,046 blocks", "284,044 tokens")
    gpu: GpuLedger


@dataclass(frozen=True)
class KvGroupInfo:
    kind: str
    num_layers: int
    block_size: int
    sliding_window: int | None
    page_bytes: int
    padding_layers: int


@dataclass(frozen=True)
class KvSummary:
    num_blocks: int
    block_size: int
    bytes_per_block: int
    tokens: int
    max_concurrency: float
    groups: tuple[KvGroupInfo, ...]
    blocks_per_request: int


@dataclass(frozen=True)
class FixResult:
    """A flag change that was re-planned and starts, with what it costs and the full command."""

    flags: Mapping[str, Any]
    summary: str
    cost: str
    command: str
    kv_cache_tokens: int
    max_concurrency: float
    max_model_len: int
    gpus: int


@dataclass(frozen=True)
class PlanResult:
    engine: EngineInfo
    model: ModelInfo
    gpu: Gpu
    verdict: Verdict
    failure: Failure | None
    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...]
    ranks: tuple[RankResult, ...]
    kv: KvSummary
    fixes: tuple[FixResult, ...]
    longest_request: int  # the longest request the pool holds (0: none)
    concurrency_at_length: tuple[tuple[int, float], ...]
    log_lines: tuple[str, ...]  # the engine's startup lines as predicted (rank 0)
    margin: Margin | None = None  # the tightest startup constraint of a plan that starts
    fewest: tuple[int, str] | None = None  # --fewest-gpus: (GPUs, the ready-to-run command)
    host: HostLedger | None = None  # the node's host memory (None: the engine does not model it yet)

    @property
    def fits(self) -> bool:
        return self.verdict is not Verdict.WILL_NOT_START

    @property
    def rank0(self) -> RankResult:
        return self.ranks[0]
