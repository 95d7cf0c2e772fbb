"""Fixes, not OOMs: search the flag space for changes that make a deployment fit, re-plan each, keep those
that do, and say what each costs (context, concurrency, GPUs). Also the inverse questions: the longest
max_model_len, the concurrency at a length, the fewest GPUs for a model at a length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from oomguard.engines.vllm import kv
from oomguard.engines.vllm.accounting import CONTEXT_BAND
from oomguard.engines.vllm.plan import Plan, PlanRequest, kv_need_bytes, kv_reserve_bytes, plan
from oomguard.errors import OomguardError
from oomguard.kinds import OUTSIDE_BUDGET, Failure, Verdict
from oomguard.ledger import KV_CACHE, GpuLedger, largest_line_that_fits
from oomguard.planning.fix_search import Fix
from oomguard.result import FixResult
from oomguard.units import GiB

# A utilization vLLM can still start with: free memory at start must cover the budget (context ~0.5 GiB).
MAX_UTILIZATION = 0.98
# Round suggested context lengths down to a multiple of this, so the command reads well.
LENGTH_ROUNDING = 1024
TP_CHOICES = (1, 2, 4, 8, 16)
# The most GPUs a fix may add up to (two 8-GPU nodes).
MAX_FIX_GPUS = 16
# Follow-up settings a fix may add (a length, a utilization) before it is given up.
SETTLE_STEPS = 5
# vLLM's fp8 method: Fp8Config.get_min_capability() is 80 (Ampere; Marlin weight-only below Ada).
FP8_MIN_CAPABILITY = (8, 0)
# Failures that more memory per token or fewer bytes per rank cure (KV shortfalls, weights too big to load).
KV_OR_WEIGHTS = (Failure.MAX_MODEL_LEN, Failure.NO_KV_MEMORY, Failure.WEIGHTS_DONT_FIT)
# What a marginal plan's tightest constraint becomes at the edge of its bands.
MARGINAL_AS_FAILURE = {
    "KV sizing": Failure.MAX_MODEL_LEN,
    "device at peak": Failure.CUDA_GRAPH_CAPTURE,
    "free memory at start": Failure.STARTUP_FREE_MEMORY,
}


def _try(request: PlanRequest, **flags: Any) -> Plan | None:
    """The plan with these flags when it fits with margin (a fix that leaves 1.0x concurrency is not one)."""
    try:
        result = plan(_apply(request, flags))
    except OomguardError:
        return None
    return result if result.verdict == Verdict.FITS else None


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
            f"prefill chunks of {candidate.engine.max_num_batched_tokens:,} tokens (slower TTFT on long "
            "prompts)"
        )
    if not parts:
        parts.append(
            f"{candidate.kv.kv_cache_tokens:,} KV tokens, {candidate.kv.max_concurrency:.2f}x concurrency"
        )
    return "; ".join(parts)


def _fix(base: Plan, candidate: Plan, flags: dict[str, Any], summary: str) -> Fix[Plan]:
    args = candidate.engine.args
    result = FixResult(
        flags=dict(flags),
        summary=summary,
        cost=_describe(base, candidate),
        command=" ".join(args.to_argv()) if args else "",
        kv_cache_tokens=candidate.kv.kv_cache_tokens,
        max_concurrency=candidate.kv.max_concurrency,
        max_model_len=candidate.engine.max_model_len,
        gpus=candidate.engine.total_gpus,
    )
    return Fix(result, candidate)


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


def _round_length(length: int, block: int) -> int:
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


def _effective_failure(result: Plan) -> Failure | None:
    """A marginal plan is treated as the failure its tightest constraint would become at the band's edge."""
    if result.failure is not None:
        return Failure(result.failure)
    if result.verdict != Verdict.MARGINAL or result.margin is None:
        return None
    return MARGINAL_AS_FAILURE.get(result.margin.constraint)


def _candidates(result: Plan, failure: Failure | None, reserve: int) -> list[tuple[str, dict[str, Any], str]]:
    """Flag changes worth re-planning for this failure, each (group, flags, summary)."""
    cfg = result.engine
    out: list[tuple[str, dict[str, Any], str]] = []

    def add(summary: str, group: str = "", **flags: Any) -> None:
        out.append((group or summary, flags, summary))

    longest = longest_max_model_len(result, reserve)
    if failure == Failure.MAX_MODEL_LEN and longest > 0:
        length = _round_length(longest, cfg.block_size)
        add(
            f"--max-model-len {length}: the longest context the KV pool holds for one request, with margin",
            max_model_len=length,
        )
    if failure in (Failure.MAX_MODEL_LEN, Failure.NO_KV_MEMORY, None):
        needed = utilization_needed(result, reserve)
        highest = min(MAX_UTILIZATION, free_memory_cap(result))
        if needed is None and highest > cfg.gpu_memory_utilization:
            # No budget holds the full length: the largest one, paired with the longest length it holds.
            add(
                f"--gpu-memory-utilization {highest}: the largest budget the free memory at start covers",
                gpu_memory_utilization=highest,
            )
        if needed is not None and needed > cfg.gpu_memory_utilization:
            add(
                f"--gpu-memory-utilization {needed}: the smallest budget that holds one max-length request "
                "with margin",
                gpu_memory_utilization=needed,
            )
    if failure in KV_OR_WEIGHTS:
        fp8_kv = {"kv_cache_dtype": "fp8"} if cfg.kv_cache_dtype_bytes > 1 else {}
        fp8_w = (
            {"quantization": "fp8"}
            if cfg.quantization is None
            and result.model.quantization is None
            and fp8_weights_supported(result)
            else {}
        )
        if fp8_kv:
            add("--kv-cache-dtype fp8: half the bytes per KV token", **fp8_kv)
        if fp8_w:
            add("--quantization fp8: load the weights in FP8 (about half the bytes)", **fp8_w)
        if fp8_kv and fp8_w:
            add("FP8 weights and FP8 KV cache", **fp8_w, **fp8_kv)
        tp, pp = cfg.tensor_parallel_size, cfg.pipeline_parallel_size
        variants: list[tuple[str, dict[str, Any]]] = [("", {})]
        if fp8_kv:
            variants.append((" with FP8 KV", fp8_kv))
        if fp8_w:
            variants.append((" with FP8 weights", fp8_w))
        if fp8_kv and fp8_w:
            variants.append((" with FP8 weights and KV", {**fp8_w, **fp8_kv}))
        for new_tp, new_pp in _shapes(tp * pp, MAX_FIX_GPUS):
            if (new_tp, new_pp) == (tp, pp) or new_tp < tp or new_pp < pp:
                continue
            parts = []
            if new_tp != tp:
                parts.append(f"--tensor-parallel-size {new_tp}")
            if new_pp != pp:
                parts.append(f"--pipeline-parallel-size {new_pp}")
            shape = {"tensor_parallel_size": new_tp, "pipeline_parallel_size": new_pp}
            for label, extra in variants:
                add(
                    " ".join(parts) + f"{label}: weights and KV over {new_tp * new_pp} GPUs",
                    group=f"shape {new_tp}x{new_pp}{label}",
                    **shape,
                    **extra,
                )
        if cfg.max_num_seqs > 256:
            add(
                "--max-num-seqs 256: a smaller sampler warm-up (rows x vocab) in the profile run",
                max_num_seqs=256,
            )
        forward = result.rank0.activation.source.startswith("profile run: forward")
        if forward and cfg.max_num_batched_tokens > 2048:
            smaller = max(2048, cfg.max_num_batched_tokens // 2)
            add(
                f"--max-num-batched-tokens {smaller}: a smaller forward pass in the profile run (activation "
                "peak)",
                max_num_batched_tokens=smaller,
            )
    if failure in OUTSIDE_BUDGET or result.warnings:
        for step in (0.02, 0.03, 0.05, 0.08):
            lower = round(max(0.5, cfg.gpu_memory_utilization - step), 2)
            add(
                f"--gpu-memory-utilization {lower}: leave room outside the budget for graphs and the sampler "
                "warm-up",
                group="lower-utilization",
                gpu_memory_utilization=lower,
            )
        if cfg.max_num_seqs > 256:
            add("--max-num-seqs 256: the sampler warm-up shrinks with its rows", max_num_seqs=256)
    if failure == Failure.STARTUP_FREE_MEMORY and cfg.replicas_per_gpu == 1:
        cap = free_memory_cap(result)
        add(
            f"--gpu-memory-utilization {cap}: what is free when the engine starts, with margin",
            gpu_memory_utilization=cap,
        )
    if failure in (Failure.REPLICAS_EXCEED_GPU, Failure.STARTUP_FREE_MEMORY) and cfg.replicas_per_gpu > 1:
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
    return out


def free_memory_cap(result: Plan) -> float:
    """The largest --gpu-memory-utilization whose budget the free memory at start covers with margin."""
    gpu = result.gpu
    free = gpu.total_bytes - result.rank0.context_bytes - result.request.used_by_other_processes
    safety = result.request.safety_bytes
    keep = CONTEXT_BAND + gpu.total_band if safety is None else safety
    return min(MAX_UTILIZATION, math.floor((free - keep) / gpu.total_bytes * 1000) / 1000)


def _settle(
    request: PlanRequest, flags: dict[str, Any], block: int, *, keep_length: bool = False
) -> tuple[Plan, dict[str, Any]] | None:
    """Re-plan a change; when it still misses only by what a follow-up setting cures, add that setting and
    try again: the longest --max-model-len the new setting holds with margin (a capacity change paired with
    the length it buys), or the utilization the free memory at start covers (a new TP x PP whose larger CUDA
    context leaves less free)."""
    asked, flags = flags, dict(flags)
    user_set_utilization = request.serve_args().get("gpu_memory_utilization") is not None
    for _ in range(SETTLE_STEPS):
        try:
            trial = plan(_apply(request, flags))
        except OomguardError:
            return None
        if trial.verdict == Verdict.FITS:
            return trial, flags
        failure = _effective_failure(trial)
        cfg = trial.engine
        if failure == Failure.STARTUP_FREE_MEMORY and cfg.replicas_per_gpu == 1:
            cap = free_memory_cap(trial)
            if cap >= cfg.gpu_memory_utilization or "gpu_memory_utilization" in asked:
                return None
            flags["gpu_memory_utilization"] = cap
        elif (
            failure in (Failure.MAX_MODEL_LEN, Failure.NO_KV_MEMORY)
            and "gpu_memory_utilization" not in flags
            and not user_set_utilization
            and free_memory_cap(trial) > cfg.gpu_memory_utilization
        ):
            # A larger budget first (it costs no context), up to what the full length needs; never above a
            # utilization the user chose (the rest of the GPU may be spoken for).
            needed = utilization_needed(trial, kv_reserve_bytes(trial))
            cap = free_memory_cap(trial)
            flags["gpu_memory_utilization"] = min(needed, cap) if needed is not None else cap
        elif (
            failure in (Failure.MAX_MODEL_LEN, Failure.NO_KV_MEMORY)
            and "max_model_len" not in asked
            and not keep_length
        ):
            length = _round_length(longest_max_model_len(trial, kv_reserve_bytes(trial)), block)
            if length <= 0 or length >= cfg.max_model_len:
                return None
            flags["max_model_len"] = length
        else:
            return None
    return None


def _follow_ups(asked: dict[str, Any], settled: dict[str, Any]) -> str:
    added = [k for k in settled if k not in asked]
    return "".join(f", with --{k.replace('_', '-')} {settled[k]}" for k in added)


def suggest_fixes(result: Plan, *, limit: int = 6) -> list[Fix[Plan]]:
    """Flag changes that make `result` fit with margin (the bands, or --safety), each re-planned and verified;
    every capacity change is paired with the longest --max-model-len it then holds. Cheapest first."""
    request = result.request
    failure = _effective_failure(result)
    candidates = _candidates(result, failure, kv_reserve_bytes(result))
    fixes: list[Fix[Plan]] = []
    seen: set[str] = set()
    solved_groups: set[str] = set()
    shape_counts: dict[tuple[bool, bool], set[int]] = {}  # solved GPU counts, by (FP8 weights, FP8 KV)
    for group, flags, summary in candidates:
        key = repr(sorted(flags.items()))
        if key in seen or group in solved_groups:
            continue
        counts = shape_counts.setdefault(("quantization" in flags, "kv_cache_dtype" in flags), set())
        if group.startswith("shape") and len(counts) >= 2 and _gpus_of(flags) > max(counts):
            continue  # two GPU counts that work are alternatives enough; more GPUs only cost more
        seen.add(key)
        settled = _settle(request, flags, result.engine.block_size)
        if settled is None:
            continue
        candidate, final = settled
        solved_groups.add(group)
        if group.startswith("shape"):
            counts.add(_gpus_of(flags))
        fixes.append(_fix(result, candidate, final, summary + _follow_ups(flags, final)))
    return sorted(fixes, key=_cost_rank)[:limit]


def _cost_rank(fix: Fix[Plan]) -> tuple[int, int, int, float]:
    """Prefer fixes that keep the GPU count, then the longest context, then the fewest accuracy trade-offs
    (FP8 weights, FP8 KV), then the most concurrency over all the engines that share a GPU."""
    r = fix.result
    risks = sum(1 for name in ("quantization", "kv_cache_dtype") if name in r.flags)
    return (r.gpus, -r.max_model_len, risks, -r.max_concurrency * fix.plan.engine.replicas_per_gpu)


def _gpus_of(flags: dict[str, Any]) -> int:
    return int(flags.get("tensor_parallel_size", 1)) * int(flags.get("pipeline_parallel_size", 1))


def _shapes(min_gpus: int, max_gpus: int) -> list[tuple[int, int]]:
    """Every TP x PP from `min_gpus` to `max_gpus` GPUs, fewest GPUs first, then TP before PP (TP also
    shards the KV heads and stays inside a node)."""
    shapes = [
        (tp, pp) for tp in TP_CHOICES for pp in range(1, max_gpus + 1) if min_gpus <= tp * pp <= max_gpus
    ]
    return sorted(shapes, key=lambda s: (s[0] * s[1], s[1]))


@dataclass(frozen=True)
class FewestGpus:
    """The smallest deployment that serves the model at the asked length with margin."""

    plan: Plan
    flags: dict[str, Any]

    @property
    def gpus(self) -> int:
        return self.plan.engine.total_gpus

    def command(self) -> str:
        args = self.plan.engine.args
        return " ".join(args.to_argv()) if args else ""


def fewest_gpus(request: PlanRequest, *, max_gpus: int = 64) -> Plan | None:
    found = fewest_gpus_search(request, max_gpus=max_gpus)
    return found.plan if found else None


def fewest_gpus_search(request: PlanRequest, *, max_gpus: int = 64) -> FewestGpus | None:
    """Every TP x PP up to `max_gpus`, each also with FP8 weights where the GPU runs them: the fewest GPUs
    that fit with margin; at equal count, BF16 weights before FP8, then TP before PP."""
    base = plan(request)
    fp8 = base.engine.quantization is None and base.model.quantization is None and fp8_weights_supported(base)
    for tp, pp in _shapes(1, max_gpus):
        variants: list[dict[str, Any]] = [{"tensor_parallel_size": tp, "pipeline_parallel_size": pp}]
        if fp8:
            variants.append({**variants[0], "quantization": "fp8"})
        for flags in variants:
            settled = _settle(request, flags, base.engine.block_size, keep_length=True)
            if settled is not None:
                return FewestGpus(*settled)
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
                f"cap the KV cache at {kv_room / GiB:.2f} GiB per replica (was "
                f"{ledger.bytes_of(KV_CACHE) / GiB:.2f}): "
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
