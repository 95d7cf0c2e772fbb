"""The startup lines vLLM prints, each once, as the pair used to write and to read it: `startup_lines` writes
what a plan predicts in the version's own format (so users can compare with a real start), and the pattern
beside each writer reads the same line back from a real log, every version's wording and any device
(diagnose, `plan --calibrate`). tests/engines/test_vllm_log_format.py reads every written line back.

Formats are those vLLM's `gpu_worker.py` and `kv_cache_utils.py` print; values printed as "GB" by old
versions are GiB (vLLM always divided by 2**30).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from oomguard.units import GiB

if TYPE_CHECKING:  # the readers (diagnose) import the patterns without the planner's configuration
    from oomguard.engines.vllm.config import EngineConfig

# A number as vLLM prints it: a sign, thousands separators, a fraction.
NUMBER = r"-?[\d,]*\.?\d+"

# "Model loading took 15.2 GiB memory and 4.1 seconds" (V1), "Loading model weights took 15.2 GB" (V0).
WEIGHTS = re.compile(rf"(?:Loading model weights took|Model loading took)\s+(?P<v>{NUMBER})\s*(?:GiB|GB)")


def weights_line(weights: int, cfg: EngineConfig) -> str:
    v = cfg.behaviour.version
    if v.minor < 8 and v.major == 0:
        return f"Loading model weights took {weights / GiB:.4f} GB"
    if cfg.behaviour.log_gib_format == "round":
        return f"Model loading took {cfg.behaviour.gib_text(weights)} GiB memory and <t> seconds"
    return f"Model loading took {weights / GiB:.4f} GiB memory and <t> seconds"


# "# GPU blocks: 21405, # CPU blocks: 2048" (V0).
BLOCKS = re.compile(r"#\s*(?:GPU|CUDA|XPU|NPU)?\s*blocks:\s*(?P<v>\d+)")


def blocks_line(num_blocks: int) -> str:
    return f"# GPU blocks: {num_blocks}, # CPU blocks: <n>"


# "Estimated CUDA graph memory: 1.23 GiB total" (v0.21+).
CUDA_GRAPH_ESTIMATE = re.compile(rf"Estimated CUDA graph memory:\s*(?P<v>{NUMBER})\s*GiB total")


def cuda_graph_estimate_line(cuda_graphs: int) -> str:
    return f"Estimated CUDA graph memory: {cuda_graphs / GiB:.2f} GiB total"


# "Available KV cache memory: 52.3 GiB".
KV_AVAILABLE = re.compile(rf"Available KV cache memory:\s*(?P<v>{NUMBER})\s*GiB")


def kv_available_line(available_kv: int, cfg: EngineConfig) -> str:
    return f"Available KV cache memory: {cfg.behaviour.gib_text(available_kv)} GiB"


# "GPU KV cache size: 342,480 tokens" (other devices name themselves; CPU offloading adds "+ host").
KV_TOKENS = re.compile(
    r"\b(?:GPU|XPU|CPU|NPU|HPU|TPU)(?: \+ host)? KV cache size:\s*(?P<v>[\d, ]+?)\s*tokens"
)
# "Maximum concurrency for 32,768 tokens per request: 10.45x".
CONCURRENCY = re.compile(
    rf"Maximum concurrency for\s*(?P<len>[\d, ]+?)\s*tokens per request:\s*(?P<x>{NUMBER})x"
)


def capacity_lines(cfg: EngineConfig, kv_tokens: int, max_concurrency: float) -> list[str]:
    """The pool's size and concurrency: one line from the versions that join them, else two."""
    one_line = cfg.behaviour.capacity_log_one_line
    length = f"{cfg.max_model_len:,}" if one_line else str(cfg.max_model_len)
    size = f"GPU KV cache size: {kv_tokens:,} tokens"
    concurrency = f"Maximum concurrency for {length} tokens per request: {max_concurrency:.2f}x"
    return [f"{size}, {concurrency}"] if one_line else [size, concurrency]


# "The current --gpu-memory-utilization=0.9000 is equivalent to ..." (v0.21+).
UTILIZATION_EQUIVALENT = re.compile(rf"The current --gpu-memory-utilization=(?P<u>{NUMBER}) is equivalent")


def utilization_equivalent_line(cfg: EngineConfig, cuda_graphs: int, total_bytes: int) -> str:
    u, share = cfg.gpu_memory_utilization, cuda_graphs / total_bytes
    return (
        f"CUDA graph memory profiling is enabled (default since v0.21.0). The current "
        f"--gpu-memory-utilization={u:.4f} is equivalent to --gpu-memory-utilization={u - share:.4f} "
        "without CUDA "
        f"graph memory profiling. To maintain the same effective KV cache size as before, increase "
        f"--gpu-memory-utilization to {min(u + share, 1.0):.4f}. To disable, set "
        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0."
    )


# Every line `startup_lines` writes is read by one of these.
READERS = (WEIGHTS, BLOCKS, CUDA_GRAPH_ESTIMATE, KV_AVAILABLE, KV_TOKENS, CONCURRENCY, UTILIZATION_EQUIVALENT)


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
    lines = [weights_line(weights, cfg)]
    if cfg.behaviour.engine == "v0":
        return [*lines, blocks_line(num_blocks)]
    graphs_in_budget = cfg.behaviour.cuda_graphs_in_budget and cuda_graphs
    if graphs_in_budget:
        lines.append(cuda_graph_estimate_line(cuda_graphs))
    if cfg.kv_cache_memory_bytes is None:
        lines.append(kv_available_line(available_kv, cfg))
    lines += capacity_lines(cfg, kv_tokens, max_concurrency)
    if graphs_in_budget and total_bytes:
        lines.append(utilization_equivalent_line(cfg, cuda_graphs, total_bytes))
    return lines
