"""The startup lines SGLang logs (rank 0), in its own format, with oomguard's numbers, to compare with a real
log.

Formats from SGLang's model_runner.py / memory_pool.py / scheduler.py; SGLang's "GB" is GiB (bytes / 2**30).
"""

from __future__ import annotations

from oomguard.engines.sglang.config import SglangConfig
from oomguard.engines.sglang.kv import SwaSplit, TokenPool
from oomguard.units import GiB


def _gb(num_bytes: float) -> str:
    return f"{num_bytes / GiB:.2f}"


def startup_lines(
    cfg: SglangConfig,
    *,
    architecture: str,
    free_at_init: int,
    weights: int,
    pool: TokenPool,
    tokens: int,
    split: SwaSplit | None,
    kv_bytes: int,
    req_to_token: int,
    cuda_graphs: int,
    max_running: int,
) -> list[str]:
    after_load = free_at_init - weights
    after_pool = after_load - kv_bytes - req_to_token
    after_graphs = after_pool - cuda_graphs
    lines = [
        f"Load weight begin. avail mem={_gb(free_at_init)} GB",
        (
            f"Load weight end. type={architecture}, dtype=torch.{cfg.dtype}, avail mem={_gb(after_load)} GB, "
            f"mem usage={_gb(weights)} GB."
        ),
    ]
    if split is not None and pool.is_hybrid_swa:
        lines.append(
            f"Use sliding window memory pool. full_layer_tokens={split.full_tokens}, "
            f"swa_layer_tokens={split.swa_tokens}"
        )
    elif pool.is_mla:
        lines.append(f"KV Cache is allocated. #tokens: {tokens}, KV size: {_gb(kv_bytes)} GB")
    else:
        lines.append(
            f"KV Cache is allocated. #tokens: {tokens}, K size: {_gb(kv_bytes / 2)} GB, "
            f"V size: {_gb(kv_bytes / 2)} GB"
        )
    lines.append(f"Memory pool end. avail mem={_gb(after_pool)} GB")
    if not cfg.disable_cuda_graph:
        lines.append(
            f"Capture cuda graph end. Time elapsed: <t> s. mem usage={_gb(cuda_graphs)} GB. "
            f"avail mem={_gb(after_graphs)} GB."
        )
    lines.append(
        f"max_total_num_tokens={tokens}, chunked_prefill_size={cfg.chunked_prefill_size}, "
        f"max_prefill_tokens={cfg.max_prefill_tokens}, max_running_requests={max_running}, "
        f"context_len={cfg.context_length}, available_gpu_mem={_gb(after_graphs)} GB"
    )
    return lines
