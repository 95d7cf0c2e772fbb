"""KV sizing given the available memory, for comparing with vLLM's own functions (bench/kv_oracle_check.py).

A KvCase is what vLLM's `kv_oracle.py` takes (a config directory, the available bytes, the KV-relevant flags);
`predict` answers it the way oomguard's planner does: groups, num_blocks (minimum over PP stages), the
"GPU KV cache size" tokens and the maximum concurrency, or vLLM's fit error.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from oomguard.engines.vllm import kv
from oomguard.engines.vllm.config import DEFAULT_BLOCK_SIZE, resolve_engine_config
from oomguard.engines.vllm.flags import ServeArgs
from oomguard.engines.vllm.parallel import distinct_ranks
from oomguard.models.resolve import resolve_model
from oomguard.units import GiB

H100_BYTES = 85_029_158_912


@dataclass(frozen=True)
class KvCase:
    model: str
    available_bytes: float
    max_model_len: int
    tp: int = 1
    pp: int = 1
    block_size: int = DEFAULT_BLOCK_SIZE
    kv_cache_dtype: str = "auto"
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024
    async_scheduling: bool = False
    disable_hybrid: bool = False

    def label(self) -> str:
        extras = [f"tp{self.tp}"] + ([f"pp{self.pp}"] if self.pp > 1 else [])
        if self.kv_cache_dtype != "auto":
            extras.append(self.kv_cache_dtype)
        if self.block_size != DEFAULT_BLOCK_SIZE:
            extras.append(f"B{self.block_size}")
        if self.async_scheduling:
            extras.append("async")
        if self.disable_hybrid:
            extras.append("no-HMA")
        return f"{self.model} {self.available_bytes / GiB:.2f}GiB L={self.max_model_len} " + " ".join(extras)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> KvCase:
        return KvCase(**data)


@dataclass(frozen=True)
class KvAnswer:
    num_blocks: int
    kv_tokens: int
    max_concurrency: float
    bytes_per_block: int
    fit_error: str | None


def predict(case: KvCase, configs: Path) -> KvAnswer:
    spec = resolve_model(str(configs / case.model))
    args = ServeArgs(
        str(configs / case.model),
        {
            "max_model_len": case.max_model_len,
            "tensor_parallel_size": case.tp,
            "pipeline_parallel_size": case.pp,
            "block_size": case.block_size,
            "kv_cache_dtype": case.kv_cache_dtype,
            "max_num_batched_tokens": case.max_num_batched_tokens,
            "max_num_seqs": case.max_num_seqs,
            "async_scheduling": case.async_scheduling,
            "disable_hybrid_kv_cache_manager": case.disable_hybrid,
        },
        {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"},
    )
    cfg = resolve_engine_config(
        args,
        spec,
        gpu_total_bytes=H100_BYTES,
        gpu_name="NVIDIA H100 80GB HBM3",
        compute_capability=(9, 0),
        vllm_version="0.33.0",
    )
    available = int(case.available_bytes)
    layouts = [kv.group_layers(kv.layer_specs(spec, cfg, p.layer_indices)) for p in distinct_ranks(spec, cfg)]
    for layout in layouts:
        check = kv.check_fits(available, layout, cfg, spec.max_position_embeddings)
        if not check.ok:
            return KvAnswer(0, 0, 0.0, layout.bytes_per_block, check.error)
    blocks = min(kv.num_blocks(available, layout) for layout in layouts)
    layout = layouts[0]
    return KvAnswer(
        blocks,
        kv.reported_kv_tokens(blocks, layout, cfg),
        kv.max_concurrency(blocks, layout, cfg),
        layout.bytes_per_block,
        None,
    )
