"""Fixes, not OOMs: search the flag space for changes that make a deployment fit, re-plan each, keep those
that do, and say what each costs (context, concurrency, GPUs). Also the inverse questions: the longest
max_model_len, the concurrency at a length, the fewest GPUs for a model at a length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from oomguard.engines.vllm import kv
from oomguard.errors import OomguardError
from oomguard.kinds import Failure
from oomguard.ledger import KV_CACHE, GpuLedger, largest_line_that_fits
from oomguard.planning.planner import Plan, PlanRequest, plan
from oomguard.units import GiB

# A utilization vLLM can still start with: free memory at start must cover the budget (context ~0.5 GiB).
MAX_UTILIZATION = 0.98
# Round suggested context lengths down to a multiple of this, so the command reads well.
LENGTH_ROUNDING = 1024
TP_CHOICES = (1, 2, 4, 8, 16)
PP_CHOICES = (1, 2, 3, 4, 6, 8)
# Failures that more memory per token or fewer bytes per rank cure (KV shortfalls, weights too big to load).
KV_OR_WEIGHTS = (Failure.MAX_MODEL_LEN, Failure.NO_KV_MEMORY, Failure.WEIGHTS_DONT_FIT)


@dataclass(frozen=True)
class Fix:
    """One change of flags that was re-planned and fits."""

    flags: dict[str, Any]
    summary: str
    cost: str
    kv_cache_tokens: int
    max_concurrency: float
    max_model_len: int
    gpus: int
    plan: Plan

    def command(self) -> str:
        args = self.plan.engine.args
        return " ".join(args.to_argv()) if args else ""


def _try(request: PlanRequest, **flags: Any) -> Plan | None:
    try:
        result = plan(_apply(request, flags))
    except OomguardError:
        return None
    return result if result.fits else None


def _apply(request: PlanRequest, flags: dict[str, Any]) -> PlanRequest:
    """Flags are vLLM's; `replicas_per_gpu` is the deployment's (how many engines share a GPU)."""
    vllm_flags = {k: v for k, v in flags.items() if k != "replicas_per_gpu"}
    changed = request.with_flags(**vllm_flags) if vllm_flags else request
    if "replicas_per_gpu" in flags:
        changed = replace(changed, replicas_per_gpu=int(flags["replicas_per_gpu"]))
    return changed


def _describe(base: Plan, candidate: Plan) -> str:
    parts = []
    if candidate.engine.max_model_len < base.engine.max_model_len:
        parts.append(f"context {base.engine.max_model_len:,} -> {candidate.engine.max_model_len:,} tokens")
    if candidate.kv.max_concurrency < base.kv.max_concurrency * 0.999 and base.fits:
        parts.append(f"concurrency {base.kv.max_concurrency:.1f}x -> {candidate.kv.max_concurrency:.1f}x")
    gpus_before, gpus_after = base.engine.total_gpus, candidate.engine.total_gpus
    if gpus_after != gpus_before:
        parts.append(f"{gpus_before} -> {gpus_after} GPUs")
    if candidate.engine.replicas_per_gpu < base.engine.replicas_per_gpu:
        parts.append(f"{base.engine.replicas_per_gpu} -> {candidate.engine.replicas_per_gpu} engines per GPU")
    if candidate.engine.kv_cache_dtype != base.engine.kv_cache_dtype:
        parts.append("fp8 KV: small accuracy risk; check your evals")
    if candidate.engine.quantization != base.engine.quantization:
        parts.append("weights quantized at load: accuracy risk; check your evals")
    if candidate.engine.max_num_seqs < base.engine.max_num_seqs:
        parts.append(f"at most {candidate.engine.max_num_seqs} concurrent sequences")
    if candidate.engine.max_num_batched_tokens < base.engine.max_num_batched_tokens:
        parts.append(
            f"prefill chunks of {candidate.engine.max_num_batched_tokens:,} tokens (slower TTFT on long prompts)"
        )
    if not parts:
        parts.append(
            f"{candidate.kv.kv_cache_tokens:,} KV tokens, {candidate.kv.max_concurrency:.1f}x concurrency"
        )
    return "; ".join(parts)


def _fix(base: Plan, candidate: Plan, flags: dict[str, Any], summary: str) -> Fix:
    return Fix(
        flags,
        summary,
        _describe(base, candidate),
        candidate.kv.kv_cache_tokens,
        candidate.kv.max_concurrency,
        candidate.engine.max_model_len,
        candidate.engine.total_gpus,
        candidate,
    )


def longest_max_model_len(result: Plan) -> int:
    """The longest max_model_len whose one request fits every worker's KV pool (0: none)."""
    limit = result.model.max_position_embeddings
    cfg = result.engine
    return min(kv.estimate_max_model_len(r.available_kv_bytes, r.layout, cfg, limit) for r in result.ranks)


def concurrency_at(result: Plan, length: int) -> float:
    """How many requests of `length` tokens the pool holds at once."""
    blocks = result.kv.layout.blocks_per_request(length, result.engine)
    return result.kv.num_gpu_blocks / blocks if blocks else 0.0


def _round_length(length: int, block: int) -> int:
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


def suggest_fixes(result: Plan, *, limit: int = 6) -> list[Fix]:
    """Flag changes that make `result` fit (or leave more headroom), each re-planned and verified."""
    request = result.request
    cfg = result.engine
    candidates: list[tuple[str, dict[str, Any], str]] = []

    def add(summary: str, group: str = "", **flags: Any) -> None:
        candidates.append((group or summary, flags, summary))

    longest = longest_max_model_len(result)
    if result.failure in (Failure.MAX_MODEL_LEN,) and longest > 0:
        length = _round_length(longest, cfg.block_size)
        add(
            f"--max-model-len {length}: the longest context the KV pool holds for one request",
            max_model_len=length,
        )
    if result.failure in (Failure.MAX_MODEL_LEN, Failure.NO_KV_MEMORY, Failure.WEIGHTS_DONT_FIT, None):
        needed = utilization_needed(result)
        if needed is not None and needed > cfg.gpu_memory_utilization:
            add(
                f"--gpu-memory-utilization {needed}: the smallest budget that holds one max-length request",
                gpu_memory_utilization=needed,
            )
    if result.failure in KV_OR_WEIGHTS and cfg.kv_cache_dtype_bytes > 1:
        add("--kv-cache-dtype fp8: half the bytes per KV token", kv_cache_dtype="fp8")
    if result.failure in KV_OR_WEIGHTS:
        tp = cfg.tensor_parallel_size
        for more in (t for t in TP_CHOICES if t > tp):
            add(
                f"--tensor-parallel-size {more}: shard weights and KV heads over {more} GPUs",
                group="tp",
                tensor_parallel_size=more,
            )
        if cfg.pipeline_parallel_size == 1 and cfg.tensor_parallel_size >= 8:
            add("--pipeline-parallel-size 2: split the layers over two stages", pipeline_parallel_size=2)
        if cfg.quantization is None and result.model.quantization is None:
            add("--quantization fp8: load the weights in FP8 (about half the bytes)", quantization="fp8")
        if cfg.max_num_seqs > 256:
            add(
                "--max-num-seqs 256: a smaller sampler warm-up (rows x vocab) in the profile run",
                max_num_seqs=256,
            )
    if result.failure in (Failure.SAMPLER_WARMUP, Failure.CUDA_GRAPH_CAPTURE) or result.warnings:
        lower = round(max(0.5, cfg.gpu_memory_utilization - 0.03), 2)
        add(
            f"--gpu-memory-utilization {lower}: leave room outside the budget for graphs and the sampler warm-up",
            gpu_memory_utilization=lower,
        )
        if cfg.max_num_seqs > 256:
            add("--max-num-seqs 256: the sampler warm-up shrinks with its rows", max_num_seqs=256)
    if result.failure == Failure.STARTUP_FREE_MEMORY and cfg.replicas_per_gpu == 1:
        cap = min(
            MAX_UTILIZATION,
            round(
                (result.gpu.total_bytes - result.rank0.context_bytes - result.request.used_by_other_processes)
                / result.gpu.total_bytes
                - 0.005,
                3,
            ),
        )
        add(
            f"--gpu-memory-utilization {cap}: what is free when the engine starts", gpu_memory_utilization=cap
        )
    if (
        result.failure in (Failure.REPLICAS_EXCEED_GPU, Failure.STARTUP_FREE_MEMORY)
        and cfg.replicas_per_gpu > 1
    ):
        share = round((1.0 / cfg.replicas_per_gpu) - 0.03, 3)
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
    if result.failure in (Failure.MAX_MODEL_LEN, Failure.NO_KV_MEMORY) and cfg.max_num_batched_tokens > 2048:
        forward = result.rank0.activation.source.startswith("profile run: forward")
        if forward:
            smaller = max(2048, cfg.max_num_batched_tokens // 2)
            add(
                f"--max-num-batched-tokens {smaller}: a smaller forward pass in the profile run (activation peak)",
                max_num_batched_tokens=smaller,
            )

    fixes: list[Fix] = []
    seen: set[str] = set()
    solved_groups: set[str] = set()
    for group, flags, summary in candidates:
        key = repr(sorted(flags.items()))
        if key in seen or group in solved_groups:
            continue
        seen.add(key)
        candidate = _try(request, **flags)
        if candidate is None and "max_model_len" not in flags and result.failure == Failure.MAX_MODEL_LEN:
            # Combine with the longest length the new setting allows.
            try:
                trial = plan(_apply(request, flags))
            except OomguardError:
                continue
            length = _round_length(longest_max_model_len(trial), cfg.block_size)
            if length > 0:
                candidate = _try(request, **flags, max_model_len=length)
                if candidate is not None:
                    flags = {**flags, "max_model_len": length}
                    summary += f", with --max-model-len {length}"
        if candidate is not None:
            solved_groups.add(group)
            fixes.append(_fix(result, candidate, flags, summary))
        if len(fixes) >= limit:
            break
    return sorted(fixes, key=_cost_rank)


def _cost_rank(fix: Fix) -> tuple[int, int, float]:
    """Prefer fixes that keep the GPU count, then the longest context, then the most concurrency over all the
    engines that share a GPU."""
    return (fix.gpus, -fix.max_model_len, -fix.max_concurrency * fix.plan.engine.replicas_per_gpu)


def fewest_gpus(request: PlanRequest, *, max_gpus: int = 64) -> Plan | None:
    """The smallest TP x PP that fits the model at the requested length (TP first: it also shards KV)."""
    shapes = sorted(
        ((tp, pp) for tp in TP_CHOICES for pp in PP_CHOICES if tp * pp <= max_gpus),
        key=lambda s: (s[0] * s[1], s[1]),
    )
    for tp, pp in shapes:
        candidate = _try(request, tensor_parallel_size=tp, pipeline_parallel_size=pp)
        if candidate is not None:
            return candidate
    return None


# ---------------------------------------------------------------------------------------------------------
# What-if ledgers (a GPU's lines given as numbers, e.g. another planner's)
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LedgerFix:
    summary: str
    ledger: GpuLedger


# What a fix leaves free on the GPU, so that it does not trade an OOM for a zero-headroom deployment.
LEDGER_FIX_HEADROOM = 0.02


def fix_ledger(ledger: GpuLedger, headroom: float = LEDGER_FIX_HEADROOM) -> list[LedgerFix]:
    """Ways to make a given GPU ledger fit with `headroom` (a fraction of the device) left: shrink each
    replica's KV cache, or run fewer replicas."""
    if ledger.fits:
        return []
    fixes: list[LedgerFix] = []
    reserve = int(ledger.total_bytes * headroom)
    target = GpuLedger(
        ledger.total_bytes - reserve, ledger.lines, ledger.replicas, ledger.label, ledger.notes
    )
    kv_room = largest_line_that_fits(target, KV_CACHE)
    if kv_room > 0 and ledger.line(KV_CACHE) is not None:
        fixed = ledger.with_line(KV_CACHE, kv_room)
        fixes.append(
            LedgerFix(
                f"cap the KV cache at {kv_room / GiB:.2f} GiB per replica (was {ledger.bytes_of(KV_CACHE) / GiB:.2f}): "
                f"e.g. --kv-cache-memory-bytes {kv_room}",
                fixed,
            )
        )
    for replicas in range(ledger.replicas - 1, 0, -1):
        fewer = ledger.with_replicas(replicas)
        if fewer.used_bytes <= ledger.total_bytes - reserve:
            fixes.append(LedgerFix(f"run {replicas} replica(s) per GPU instead of {ledger.replicas}", fewer))
            break
    return fixes
