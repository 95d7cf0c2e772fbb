"""The startup log lines vLLM prints for a plan, in the version's own format, so users can compare."""

from __future__ import annotations

from oomguard.engines.vllm.config import EngineConfig
from oomguard.units import GiB


def _weights_line(weights: int, cfg: EngineConfig) -> str:
    v = cfg.behaviour.version
    if v.minor < 8 and v.major == 0:
        return f"Loading model weights took {weights / GiB:.4f} GB"
    if cfg.behaviour.log_gib_format == "round":
        return f"Model loading took {cfg.behaviour.gib_text(weights)} GiB memory and <t> seconds"
    return f"Model loading took {weights / GiB:.4f} GiB memory and <t> seconds"


def startup_lines(
    cfg: EngineConfig,
    *,
    weights: int,
    available_kv: int,
    num_blocks: int,
    kv_tokens: int,
    max_concurrency: float,
    cuda_graphs: int,
    total_bytes: int = 0,
) -> list[str]:
    """What rank 0 logs at startup (INFO), numbers as oomguard predicts them."""
    lines = [_weights_line(weights, cfg)]
    if cfg.behaviour.engine == "v0":
        lines.append(f"# GPU blocks: {num_blocks}, # CPU blocks: <n>")
        return lines
    if cfg.behaviour.cuda_graphs_in_budget and cuda_graphs:
        lines.append(f"Estimated CUDA graph memory: {cuda_graphs / GiB:.2f} GiB total")
    if cfg.kv_cache_memory_bytes is None:
        lines.append(f"Available KV cache memory: {cfg.behaviour.gib_text(available_kv)} GiB")
    length = f"{cfg.max_model_len:,}" if cfg.behaviour.capacity_log_one_line else str(cfg.max_model_len)
    if cfg.behaviour.capacity_log_one_line:
        lines.append(
            f"GPU KV cache size: {kv_tokens:,} tokens, Maximum concurrency for {length} tokens per "
            f"request: {max_concurrency:.2f}x"
        )
    else:
        lines.append(f"GPU KV cache size: {kv_tokens:,} tokens")
        lines.append(f"Maximum concurrency for {length} tokens per request: {max_concurrency:.2f}x")
    if cfg.behaviour.cuda_graphs_in_budget and cuda_graphs and total_bytes:
        u, share = cfg.gpu_memory_utilization, cuda_graphs / total_bytes
        lines.append(
            f"CUDA graph memory profiling is enabled (default since v0.21.0). The current "
            f"--gpu-memory-utilization={u:.4f} is equivalent to --gpu-memory-utilization={u - share:.4f} "
            "without CUDA "
            f"graph memory profiling. To maintain the same effective KV cache size as before, increase "
            f"--gpu-memory-utilization to {min(u + share, 1.0):.4f}. To disable, set "
            "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0."
        )
    return lines
