"""vLLM's fix candidates and the inverse questions they rest on: the longest max_model_len, the concurrency at
a length, the smallest utilization that holds one request. `planning.fix_search` re-plans each candidate.
"""

from __future__ import annotations

import math
from typing import Any

from oomguard.engines.base import FixCandidate
from oomguard.engines.vllm import kv
from oomguard.engines.vllm.plan import Plan
from oomguard.kinds import KV_SHORTFALLS, OUTSIDE_BUDGET, Failure

# Failures that more memory per token or fewer bytes per rank cure (KV shortfalls, weights too big to load).
KV_OR_WEIGHTS = (*KV_SHORTFALLS, Failure.WEIGHTS_DONT_FIT)

# A utilization vLLM can still start with: free memory at start must cover the budget (context ~0.5 GiB).
MAX_UTILIZATION = 0.98
# Round suggested context lengths down to a multiple of this, so the command reads well.
LENGTH_ROUNDING = 1024
TP_CHOICES = (1, 2, 4, 8, 16)
PP_CHOICES = (1, 2, 3, 4, 6, 8)
# How far a fix lowers the utilization to make room outside the budget, and the lowest it goes.
UTILIZATION_STEP_DOWN = 0.03
LOWEST_SUGGESTED_UTILIZATION = 0.5
# The free-memory fix stays this far below what is free at start (rounding, allocator slack).
FREE_MEMORY_SLACK = 0.005
# A max_num_seqs whose sampler warm-up (rows x vocab x fp32) rarely dominates the profile run.
SMALLER_MAX_NUM_SEQS = 256
# The smallest prefill chunk a fix proposes (long prompts get slow below it).
SMALLEST_BATCHED_TOKENS = 2048
# A TP at least this large leaves PP as the next way to add GPUs.
TP_BEFORE_PP = 8


def longest_max_model_len(result: Plan) -> int:
    """The longest max_model_len whose one request fits every worker's KV pool (0: none)."""
    limit = result.model.max_position_embeddings
    cfg = result.engine
    return min(kv.estimate_max_model_len(r.available_kv_bytes, r.layout, cfg, limit) for r in result.ranks)


def concurrency_at(result: Plan, length: int) -> float:
    """How many requests of `length` tokens the pool holds at once."""
    blocks = result.kv.layout.blocks_per_request(length, result.engine)
    return result.kv.num_gpu_blocks / blocks if blocks else 0.0


def round_length(length: int, block: int) -> int:
    if length >= 2 * LENGTH_ROUNDING:
        return length // LENGTH_ROUNDING * LENGTH_ROUNDING
    return max(block, length // block * block)


def utilization_needed(result: Plan) -> float | None:
    """The smallest --gpu-memory-utilization that fits one max_model_len request on every worker."""
    cfg = result.engine
    worst = 0.0
    for r in result.ranks:
        need_kv = kv.needed_bytes(cfg.max_model_len, r.layout, cfg)
        if cfg.behaviour.null_block_in_fit_check:
            need_kv += r.layout.bytes_per_block
        fixed = r.budget_bytes - r.available_kv_bytes
        worst = max(worst, (fixed + need_kv) / result.gpu.total_bytes)
    needed = math.ceil(worst * 1000) / 1000
    return needed if needed <= MAX_UTILIZATION else None


def fix_candidates(result: Plan) -> list[FixCandidate]:
    """Flag changes worth re-planning for `result`, most wanted first."""
    cfg = result.engine
    failure = result.failure
    out: list[FixCandidate] = []

    def add(summary: str, group: str = "", **flags: Any) -> None:
        out.append(FixCandidate(flags, summary, group))

    longest = longest_max_model_len(result)
    if failure == Failure.MAX_MODEL_LEN and longest > 0:
        length = round_length(longest, cfg.block_size)
        add(
            f"--max-model-len {length}: the longest context the KV pool holds for one request",
            max_model_len=length,
        )
    if failure in (*KV_OR_WEIGHTS, None):
        needed = utilization_needed(result)
        if needed is not None and needed > cfg.gpu_memory_utilization:
            add(
                f"--gpu-memory-utilization {needed}: the smallest budget that holds one max-length request",
                gpu_memory_utilization=needed,
            )
    if failure in KV_OR_WEIGHTS and cfg.kv_cache_dtype_bytes > 1:
        add("--kv-cache-dtype fp8: half the bytes per KV token", kv_cache_dtype="fp8")
    if failure in KV_OR_WEIGHTS:
        tp = cfg.tensor_parallel_size
        for more in (t for t in TP_CHOICES if t > tp):
            add(
                f"--tensor-parallel-size {more}: shard weights and KV heads over {more} GPUs",
                group="tp",
                tensor_parallel_size=more,
            )
        if cfg.pipeline_parallel_size == 1 and cfg.tensor_parallel_size >= TP_BEFORE_PP:
            add("--pipeline-parallel-size 2: split the layers over two stages", pipeline_parallel_size=2)
        if cfg.quantization is None and result.model.quantization is None:
            add("--quantization fp8: load the weights in FP8 (about half the bytes)", quantization="fp8")
        if cfg.max_num_seqs > SMALLER_MAX_NUM_SEQS:
            add(
                f"--max-num-seqs {SMALLER_MAX_NUM_SEQS}: a smaller sampler warm-up (rows x vocab) in the "
                "profile run",
                max_num_seqs=SMALLER_MAX_NUM_SEQS,
            )
    if failure in OUTSIDE_BUDGET or result.warnings:
        lower = round(
            max(LOWEST_SUGGESTED_UTILIZATION, cfg.gpu_memory_utilization - UTILIZATION_STEP_DOWN), 2
        )
        add(
            f"--gpu-memory-utilization {lower}: leave room outside the budget for graphs and the sampler "
            "warm-up",
            gpu_memory_utilization=lower,
        )
        if cfg.max_num_seqs > SMALLER_MAX_NUM_SEQS:
            add(
                f"--max-num-seqs {SMALLER_MAX_NUM_SEQS}: the sampler warm-up shrinks with its rows",
                max_num_seqs=SMALLER_MAX_NUM_SEQS,
            )
    if failure == Failure.STARTUP_FREE_MEMORY and cfg.replicas_per_gpu == 1:
        total = result.gpu.total_bytes
        free = total - result.rank0.context_bytes - result.request.used_by_other_processes
        cap = min(MAX_UTILIZATION, round(free / total - FREE_MEMORY_SLACK, 3))
        add(
            f"--gpu-memory-utilization {cap}: what is free when the engine starts", gpu_memory_utilization=cap
        )
    if failure in (Failure.REPLICAS_EXCEED_GPU, Failure.STARTUP_FREE_MEMORY) and cfg.replicas_per_gpu > 1:
        share = round((1.0 / cfg.replicas_per_gpu) - UTILIZATION_STEP_DOWN, 3)
        add(
            f"--gpu-memory-utilization {share} per replica: {cfg.replicas_per_gpu} replicas share one GPU",
            gpu_memory_utilization=share,
        )
        for fewer in range(cfg.replicas_per_gpu - 1, 0, -1):
            add(
                f"{fewer} replica(s) per GPU instead of {cfg.replicas_per_gpu}",
                group="replicas",
                replicas_per_gpu=fewer,
            )
    forward_peak = result.rank0.activation.source.startswith("profile run: forward")
    if failure in KV_SHORTFALLS and cfg.max_num_batched_tokens > SMALLEST_BATCHED_TOKENS and forward_peak:
        smaller = max(SMALLEST_BATCHED_TOKENS, cfg.max_num_batched_tokens // 2)
        add(
            f"--max-num-batched-tokens {smaller}: a smaller forward pass in the profile run (activation "
            "peak)",
            max_num_batched_tokens=smaller,
        )
    return out


def describe(base: Plan, candidate: Plan) -> str:
    """What a fix costs against the plan it fixes."""
    parts = []
    b, c = base.engine, candidate.engine
    if c.max_model_len < b.max_model_len:
        parts.append(f"context {b.max_model_len:,} -> {c.max_model_len:,} tokens")
    if candidate.kv.max_concurrency < base.kv.max_concurrency * 0.999 and base.fits:
        parts.append(f"concurrency {base.kv.max_concurrency:.1f}x -> {candidate.kv.max_concurrency:.1f}x")
    if c.total_gpus != b.total_gpus:
        parts.append(f"{b.total_gpus} -> {c.total_gpus} GPUs")
    if c.replicas_per_gpu < b.replicas_per_gpu:
        parts.append(f"{b.replicas_per_gpu} -> {c.replicas_per_gpu} engines per GPU")
    if c.kv_cache_dtype != b.kv_cache_dtype:
        parts.append("fp8 KV: small accuracy risk; check your evals")
    if c.quantization != b.quantization:
        parts.append("weights quantized at load: accuracy risk; check your evals")
    if c.max_num_seqs < b.max_num_seqs:
        parts.append(f"at most {c.max_num_seqs} concurrent sequences")
    if c.max_num_batched_tokens < b.max_num_batched_tokens:
        parts.append(f"prefill chunks of {c.max_num_batched_tokens:,} tokens (slower TTFT on long prompts)")
    if not parts:
        parts.append(
            f"{candidate.kv.kv_cache_tokens:,} KV tokens, {candidate.kv.max_concurrency:.1f}x concurrency"
        )
    return "; ".join(parts)
