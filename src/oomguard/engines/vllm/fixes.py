"""vLLM's fix candidates, the follow-up a candidate needs to settle, the cost of a fix, and the inverse
questions they rest on: the longest max_model_len, the concurrency at a length, the smallest utilization that
holds one request with margin, what the free memory at start covers. `planning.fix_search` runs the loop.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from oomguard.engines.base import FixCandidate
from oomguard.engines.vllm import kv
from oomguard.engines.vllm.accounting import CONTEXT_BAND
from oomguard.engines.vllm.plan import Plan, kv_need_bytes, kv_reserve_bytes
from oomguard.kinds import OUTSIDE_BUDGET, Failure, Verdict
from oomguard.result import FixResult

# A utilization vLLM can still start with: free memory at start must cover the budget (context ~0.5 GiB).
MAX_UTILIZATION = 0.98
# Round suggested context lengths down to a multiple of this, so the command reads well.
LENGTH_ROUNDING = 1024
TP_CHOICES = (1, 2, 4, 8, 16)
# The most GPUs a fix may add up to (two 8-GPU nodes).
MAX_FIX_GPUS = 16
# vLLM's fp8 method: Fp8Config.get_min_capability() is 80 (Ampere; Marlin weight-only below Ada).
FP8_MIN_CAPABILITY = (8, 0)
# Failures that more memory per token or fewer bytes per rank cure (KV shortfalls, weights too big to load).
KV_OR_WEIGHTS = (Failure.MAX_MODEL_LEN, Failure.NO_KV_MEMORY, Failure.WEIGHTS_DONT_FIT)
# Failures a larger budget or a shorter length cure.
KV_SHORT = (Failure.MAX_MODEL_LEN, Failure.NO_KV_MEMORY)
# What a marginal plan's tightest constraint becomes at the edge of its bands.
MARGINAL_AS_FAILURE = {
    "KV sizing": Failure.MAX_MODEL_LEN,
    "device at peak": Failure.CUDA_GRAPH_CAPTURE,
    "free memory at start": Failure.STARTUP_FREE_MEMORY,
}
# A max_num_seqs whose sampler warm-up (rows x vocab x fp32) rarely dominates the profile run.
SMALLER_MAX_NUM_SEQS = 256
# The smallest prefill chunk a fix proposes (long prompts get slow below it).
SMALLEST_BATCHED_TOKENS = 2048
# How far fixes lower the utilization to make room outside the budget (alternatives, smallest first), and the
# lowest they go.
UTILIZATION_STEPS_DOWN = (0.02, 0.03, 0.05, 0.08)
LOWEST_SUGGESTED_UTILIZATION = 0.5
# Replicas sharing a GPU each get an equal share, less this much for their CUDA contexts.
REPLICA_SHARE_SLACK = 0.03
# A fix that keeps at least this share of the concurrency costs none (smaller changes are rounding).
CONCURRENCY_KEPT = 0.999
# The flags whose change trades accuracy for memory (FP8 weights, FP8 KV).
ACCURACY_TRADE_OFFS = ("quantization", "kv_cache_dtype")
REPLICAS = "replicas_per_gpu"


def longest_max_model_len(result: Plan, reserve: int = 0) -> int:
    """The longest max_model_len whose one request fits every worker's KV pool (0: none), keeping `reserve`
    bytes of the pool spare (the margin a fix aims at)."""
    limit = result.model.max_position_embeddings
    cfg = result.engine
    return min(
        kv.estimate_max_model_len(r.available_kv_bytes - reserve, r.layout, cfg, limit) for r in result.ranks
    )


def concurrency_at(result: Plan, length: int) -> float:
    """How many requests of `length` tokens the pool holds at once."""
    blocks = result.kv.layout.blocks_per_request(length, result.engine)
    return result.kv.num_gpu_blocks / blocks if blocks else 0.0


def round_length(length: int, block: int) -> int:
    if length >= 2 * LENGTH_ROUNDING:
        return length // LENGTH_ROUNDING * LENGTH_ROUNDING
    return max(block, length // block * block)


def utilization_needed(result: Plan, reserve: int = 0) -> float | None:
    """The smallest --gpu-memory-utilization that fits one max_model_len request on every worker, with
    `reserve` bytes of the pool to spare."""
    cfg = result.engine
    worst = 0.0
    for r in result.ranks:
        need_kv = kv_need_bytes(cfg.max_model_len, r.layout, cfg) + reserve
        fixed = r.budget_bytes - r.available_kv_bytes
        worst = max(worst, (fixed + need_kv) / result.gpu.total_bytes)
    needed = math.ceil(worst * 1000) / 1000
    return needed if needed <= MAX_UTILIZATION else None


def fp8_weights_supported(result: Plan) -> bool:
    """vLLM's fp8 method needs compute capability >= 8.0 (Fp8Config.get_min_capability, vLLM
    model_executor/layers/quantization/fp8.py); unknown capabilities (AMD, a bare size) are not refused."""
    cc = result.gpu.compute_capability
    return cc is None or cc >= FP8_MIN_CAPABILITY


def free_memory_cap(result: Plan) -> float:
    """The largest --gpu-memory-utilization whose budget the free memory at start covers with margin."""
    gpu = result.gpu
    free = gpu.total_bytes - result.rank0.context_bytes - result.request.used_by_other_processes
    safety = result.request.safety_bytes
    keep = CONTEXT_BAND + gpu.total_band if safety is None else safety
    return min(MAX_UTILIZATION, math.floor((free - keep) / gpu.total_bytes * 1000) / 1000)


def effective_failure(result: Plan) -> Failure | None:
    """A marginal plan is treated as the failure its tightest constraint would become at the band's edge."""
    if result.failure is not None:
        return Failure(result.failure)
    if result.verdict != Verdict.MARGINAL or result.margin is None:
        return None
    return MARGINAL_AS_FAILURE.get(result.margin.constraint)


def shapes(min_gpus: int, max_gpus: int) -> list[tuple[int, int]]:
    """Every TP x PP from `min_gpus` to `max_gpus` GPUs, fewest GPUs first, then TP before PP (TP also
    shards the KV heads and stays inside a node)."""
    found = [
        (tp, pp) for tp in TP_CHOICES for pp in range(1, max_gpus + 1) if min_gpus <= tp * pp <= max_gpus
    ]
    return sorted(found, key=lambda s: (s[0] * s[1], s[1]))


# ---------------------------------------------------------------------------------------------------------
# Candidates, by what the failure calls for
# ---------------------------------------------------------------------------------------------------------


class _Candidates:
    """The candidate list being built, in the order it is tried."""

    def __init__(self) -> None:
        self.out: list[FixCandidate] = []

    def add(
        self, summary: str, flags: Mapping[str, Any], group: str = "", gpus: int = 0, variant: str = ""
    ) -> None:
        self.out.append(FixCandidate(dict(flags), summary, group, gpus, variant))


def fix_candidates(result: Plan) -> list[FixCandidate]:
    """Flag changes worth re-planning for `result` (failing, marginal or warned), most wanted first."""
    failure = effective_failure(result)
    reserve = kv_reserve_bytes(result)
    found = _Candidates()
    _length_and_budget(result, failure, reserve, found)
    if failure in KV_OR_WEIGHTS:
        _capacity(result, found)
    if failure in OUTSIDE_BUDGET or result.warnings:
        _room_outside_budget(result, found)
    _free_memory_and_replicas(result, failure, found)
    return found.out


def _length_and_budget(result: Plan, failure: Failure | None, reserve: int, found: _Candidates) -> None:
    """A shorter context, or a larger budget that holds the full one (no budget: the largest there is)."""
    cfg = result.engine
    longest = longest_max_model_len(result, reserve)
    if failure == Failure.MAX_MODEL_LEN and longest > 0:
        length = round_length(longest, cfg.block_size)
        found.add(
            f"--max-model-len {length}: the longest context the KV pool holds for one request, with margin",
            {"max_model_len": length},
        )
    if failure not in (*KV_SHORT, None):
        return
    needed = utilization_needed(result, reserve)
    highest = min(MAX_UTILIZATION, free_memory_cap(result))
    if needed is None and highest > cfg.gpu_memory_utilization:
        # No budget holds the full length: the largest one, paired with the longest length it holds.
        found.add(
            f"--gpu-memory-utilization {highest}: the largest budget the free memory at start covers",
            {"gpu_memory_utilization": highest},
        )
    if needed is not None and needed > cfg.gpu_memory_utilization:
        found.add(
            f"--gpu-memory-utilization {needed}: the smallest budget that holds one max-length request "
            "with margin",
            {"gpu_memory_utilization": needed},
        )


def _capacity(result: Plan, found: _Candidates) -> None:
    """Fewer bytes per token or per rank: FP8 KV, FP8 weights, every larger TP x PP (each also with the FP8
    variants), a smaller sampler warm-up or forward pass in the profile run."""
    cfg = result.engine
    fp8_kv = {"kv_cache_dtype": "fp8"} if cfg.kv_cache_dtype_bytes > 1 else {}
    fp8_w = (
        {"quantization": "fp8"}
        if cfg.quantization is None and result.model.quantization is None and fp8_weights_supported(result)
        else {}
    )
    if fp8_kv:
        found.add("--kv-cache-dtype fp8: half the bytes per KV token", fp8_kv)
    if fp8_w:
        found.add("--quantization fp8: load the weights in FP8 (about half the bytes)", fp8_w)
    if fp8_kv and fp8_w:
        found.add("FP8 weights and FP8 KV cache", {**fp8_w, **fp8_kv})
    tp, pp = cfg.tensor_parallel_size, cfg.pipeline_parallel_size
    variants: list[tuple[str, dict[str, Any]]] = [("", {})]
    if fp8_kv:
        variants.append((" with FP8 KV", fp8_kv))
    if fp8_w:
        variants.append((" with FP8 weights", fp8_w))
    if fp8_kv and fp8_w:
        variants.append((" with FP8 weights and KV", {**fp8_w, **fp8_kv}))
    for new_tp, new_pp in shapes(tp * pp, MAX_FIX_GPUS):
        if (new_tp, new_pp) == (tp, pp) or new_tp < tp or new_pp < pp:
            continue
        parts = []
        if new_tp != tp:
            parts.append(f"--tensor-parallel-size {new_tp}")
        if new_pp != pp:
            parts.append(f"--pipeline-parallel-size {new_pp}")
        shape = {"tensor_parallel_size": new_tp, "pipeline_parallel_size": new_pp}
        for label, extra in variants:
            found.add(
                " ".join(parts) + f"{label}: weights and KV over {new_tp * new_pp} GPUs",
                {**shape, **extra},
                group=f"shape {new_tp}x{new_pp}{label}",
                gpus=new_tp * new_pp,
                variant=label,
            )
    if cfg.max_num_seqs > SMALLER_MAX_NUM_SEQS:
        found.add(
            f"--max-num-seqs {SMALLER_MAX_NUM_SEQS}: a smaller sampler warm-up (rows x vocab) in the profile "
            "run",
            {"max_num_seqs": SMALLER_MAX_NUM_SEQS},
        )
    forward = result.rank0.activation.source.startswith("profile run: forward")
    if forward and cfg.max_num_batched_tokens > SMALLEST_BATCHED_TOKENS:
        smaller = max(SMALLEST_BATCHED_TOKENS, cfg.max_num_batched_tokens // 2)
        found.add(
            f"--max-num-batched-tokens {smaller}: a smaller forward pass in the profile run (activation "
            "peak)",
            {"max_num_batched_tokens": smaller},
        )


def _room_outside_budget(result: Plan, found: _Candidates) -> None:
    """Graphs, the sampler warm-up and the CUDA context live outside the budget: a smaller budget (steps of
    one group, the first that fits wins) or a smaller warm-up."""
    cfg = result.engine
    for step in UTILIZATION_STEPS_DOWN:
        lower = round(max(LOWEST_SUGGESTED_UTILIZATION, cfg.gpu_memory_utilization - step), 2)
        found.add(
            f"--gpu-memory-utilization {lower}: leave room outside the budget for graphs and the sampler "
            "warm-up",
            {"gpu_memory_utilization": lower},
            group="lower-utilization",
        )
    if cfg.max_num_seqs > SMALLER_MAX_NUM_SEQS:
        found.add(
            f"--max-num-seqs {SMALLER_MAX_NUM_SEQS}: the sampler warm-up shrinks with its rows",
            {"max_num_seqs": SMALLER_MAX_NUM_SEQS},
        )


def _free_memory_and_replicas(result: Plan, failure: Failure | None, found: _Candidates) -> None:
    """A budget the free memory at start covers; replicas sharing a GPU: an equal share each, or fewer."""
    cfg = result.engine
    if failure == Failure.STARTUP_FREE_MEMORY and cfg.replicas_per_gpu == 1:
        cap = free_memory_cap(result)
        found.add(
            f"--gpu-memory-utilization {cap}: what is free when the engine starts, with margin",
            {"gpu_memory_utilization": cap},
        )
    if failure in (Failure.REPLICAS_EXCEED_GPU, Failure.STARTUP_FREE_MEMORY) and cfg.replicas_per_gpu > 1:
        share = round((1.0 / cfg.replicas_per_gpu) - REPLICA_SHARE_SLACK, 3)
        found.add(
            f"--gpu-memory-utilization {share} per replica: {cfg.replicas_per_gpu} replicas share one GPU",
            {"gpu_memory_utilization": share},
        )
        for fewer in range(cfg.replicas_per_gpu - 1, 0, -1):
            found.add(
                f"{fewer} replica(s) per GPU instead of {cfg.replicas_per_gpu}",
                {REPLICAS: fewer},
                group="replicas",
            )


# ---------------------------------------------------------------------------------------------------------
# Settling a candidate, and what a fix costs
# ---------------------------------------------------------------------------------------------------------


def follow_up(
    base: Plan, trial: Plan, flags: Mapping[str, Any], pinned: frozenset[str]
) -> dict[str, Any] | None:
    """The setting to add when `trial` (the candidate re-planned) still misses only by what it cures; None to
    give up. The utilization the free memory at start covers (a new TP x PP whose larger CUDA context leaves
    less free); a larger budget first (it costs no context), up to what the full length needs, never above a
    utilization the user chose (the rest of the GPU may be spoken for); else the longest --max-model-len the
    new setting holds with margin (a capacity change paired with the length it buys). `pinned` settings are
    the candidate's own and never changed."""
    failure = effective_failure(trial)
    cfg = trial.engine
    utilization = "gpu_memory_utilization"
    user_set_utilization = base.request.serve_args().get(utilization) is not None
    if failure == Failure.STARTUP_FREE_MEMORY and cfg.replicas_per_gpu == 1:
        cap = free_memory_cap(trial)
        if cap >= cfg.gpu_memory_utilization or utilization in pinned:
            return None
        return {utilization: cap}
    if failure not in KV_SHORT:
        return None
    if (
        utilization not in flags
        and not user_set_utilization
        and free_memory_cap(trial) > cfg.gpu_memory_utilization
    ):
        needed = utilization_needed(trial, kv_reserve_bytes(trial))
        cap = free_memory_cap(trial)
        return {utilization: min(needed, cap) if needed is not None else cap}
    if "max_model_len" not in pinned:
        length = round_length(longest_max_model_len(trial, kv_reserve_bytes(trial)), base.engine.block_size)
        if 0 < length < cfg.max_model_len:
            return {"max_model_len": length}
    return None


def describe(base: Plan, candidate: Plan) -> str:
    """What a fix costs against the plan it fixes."""
    parts = []
    b, c = base.engine, candidate.engine
    if c.max_model_len < b.max_model_len:
        parts.append(f"context {b.max_model_len:,} -> {c.max_model_len:,} tokens")
    if candidate.kv.max_concurrency < base.kv.max_concurrency * CONCURRENCY_KEPT and base.fits:
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
            f"{candidate.kv.kv_cache_tokens:,} KV tokens, {candidate.kv.max_concurrency:.2f}x concurrency"
        )
    return "; ".join(parts)


def fix_order(fix: FixResult, fixed: Plan) -> tuple[float, ...]:
    """Keep the GPU count, then the longest context, then the fewest accuracy trade-offs (FP8 weights, FP8
    KV), then the most concurrency over all the engines that share a GPU."""
    risks = sum(1 for name in ACCURACY_TRADE_OFFS if name in fix.flags)
    return (fix.gpus, -fix.max_model_len, risks, -fix.max_concurrency * fixed.engine.replicas_per_gpu)
