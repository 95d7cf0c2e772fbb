"""SGLang's fix candidates: a larger static share, more TP, fp8 KV, or (for memory outside the share) a
smaller share, smaller graph buffers and prefill chunks. `planning.fix_search` re-plans each one.
"""

from __future__ import annotations

import math

from oomguard.engines.base import FixCandidate
from oomguard.engines.sglang.plan import DEVICE_AT_PEAK, TOKEN_POOL, SglangPlan
from oomguard.kinds import Failure, Verdict

# The largest --mem-fraction-static a fix proposes: SGLang still needs room for graphs and a prefill outside
# it.
MAX_FRACTION = 0.95
FRACTION_STEP = 0.05
LOWEST_SUGGESTED_FRACTION = 0.5
TP_CHOICES = (1, 2, 4, 8, 16)
# The smallest CUDA-graph batch and prefill chunk a fix proposes, and how much smaller it makes them.
SMALLEST_GRAPH_BS = 16
GRAPH_BS_DIVISOR = 4
SMALLEST_PREFILL_CHUNK = 2048
# What a marginal plan's tightest constraint becomes at the edge of its bands.
MARGINAL_AS_FAILURE = {TOKEN_POOL: Failure.NO_KV_MEMORY, DEVICE_AT_PEAK: Failure.CUDA_GRAPH_CAPTURE}


def effective_failure(result: SglangPlan) -> Failure | None:
    """A marginal plan is treated as the failure its tightest constraint would become at the band's edge."""
    if result.failure is not None or result.verdict != Verdict.MARGINAL or result.margin is None:
        return result.failure
    return MARGINAL_AS_FAILURE.get(result.margin.constraint)


def fraction_needed(result: SglangPlan, tokens: int) -> float | None:
    """The smallest --mem-fraction-static whose pool holds `tokens` on every rank: (W + tokens x cell) / P."""
    worst = 0.0
    for r in result.ranks:
        if r.free_at_init <= 0:
            return None
        worst = max(worst, (r.weights.bytes + tokens * r.layout.cell_bytes) / r.free_at_init)
    needed = math.ceil(worst * 1000) / 1000
    return needed if needed <= MAX_FRACTION else None


def longest_context(result: SglangPlan) -> int:
    """The longest request the pool can hold (SGLang admits up to the pool size), capped by the model."""
    return max(0, min(result.kv.kv_cache_tokens, result.model.max_position_embeddings))


def fix_candidates(result: SglangPlan) -> list[FixCandidate]:
    cfg = result.engine
    out: list[FixCandidate] = []
    failure = effective_failure(result)
    short_pool = result.fits and result.warnings and result.kv.kv_cache_tokens < cfg.context_length
    if failure in (Failure.NO_KV_MEMORY, Failure.WEIGHTS_DONT_FIT) or short_pool:
        needed = fraction_needed(result, cfg.context_length)
        if needed is not None and needed > cfg.mem_fraction_static:
            out.append(
                FixCandidate(
                    {"mem_fraction_static": needed},
                    f"--mem-fraction-static {needed}: the smallest static share that holds one "
                    f"{cfg.context_length:,}-token request",
                )
            )
        for tp in (t for t in TP_CHOICES if t > cfg.tp_size):
            out.append(
                FixCandidate({"tp_size": tp}, f"--tp {tp}: shard weights and KV heads over {tp} GPUs", "tp")
            )
        if cfg.kv_cache_dtype_bytes > 1:
            out.append(
                FixCandidate(
                    {"kv_cache_dtype": "fp8_e4m3"}, "--kv-cache-dtype fp8_e4m3: half the bytes per token"
                )
            )
    if failure == Failure.CUDA_GRAPH_CAPTURE or result.warnings:
        lower = round(max(LOWEST_SUGGESTED_FRACTION, cfg.mem_fraction_static - FRACTION_STEP), 3)
        out.append(
            FixCandidate(
                {"mem_fraction_static": lower},
                f"--mem-fraction-static {lower}: more room outside the pool for graphs and prefills",
            )
        )
        if not cfg.disable_cuda_graph and cfg.cuda_graph_max_bs > SMALLEST_GRAPH_BS:
            bs = max(SMALLEST_GRAPH_BS, cfg.cuda_graph_max_bs // GRAPH_BS_DIVISOR)
            out.append(
                FixCandidate({"cuda_graph_max_bs": bs}, f"--cuda-graph-max-bs {bs}: smaller graph buffers")
            )
        if cfg.chunked_prefill_size > SMALLEST_PREFILL_CHUNK:
            size = max(SMALLEST_PREFILL_CHUNK, cfg.chunked_prefill_size // 2)
            out.append(
                FixCandidate(
                    {"chunked_prefill_size": size},
                    f"--chunked-prefill-size {size}: a smaller prefill activation peak",
                )
            )
    return out


def describe(base: SglangPlan, candidate: SglangPlan) -> str:
    """What a fix costs against the plan it fixes."""
    b, c = base.engine, candidate.engine
    parts = []
    if c.context_length < b.context_length:
        parts.append(f"context {b.context_length:,} -> {c.context_length:,} tokens")
    if c.total_gpus != b.total_gpus:
        parts.append(f"{b.total_gpus} -> {c.total_gpus} GPUs")
    if c.kv_cache_dtype != b.kv_cache_dtype:
        parts.append("fp8 KV: small accuracy risk; check your evals")
    if c.cuda_graph_max_bs < b.cuda_graph_max_bs:
        parts.append(f"decode batches above {c.cuda_graph_max_bs} run without CUDA graphs")
    if c.chunked_prefill_size < b.chunked_prefill_size:
        parts.append(f"prefill chunks of {c.chunked_prefill_size:,} tokens (slower TTFT)")
    parts.append(f"{candidate.kv.kv_cache_tokens:,} KV tokens")
    return "; ".join(parts)
