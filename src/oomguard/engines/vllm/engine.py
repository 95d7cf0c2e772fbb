"""vLLM as the planning package sees it: a neutral request in, vLLM's own plan, its fixes, the neutral
result."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from oomguard.engines.base import FixCandidate
from oomguard.engines.common import plan_result
from oomguard.engines.vllm import fixes as vllm_fixes
from oomguard.engines.vllm.flags import MEMORY_FLAGS, ServeArgs, is_known_field, parse_serve_command
from oomguard.engines.vllm.host import host_ledger, plan_host_inputs
from oomguard.engines.vllm.log_format import startup_lines
from oomguard.engines.vllm.plan import Plan, PlanRequest, RankLedger, plan
from oomguard.engines.vllm.versions import NEWEST_KNOWN
from oomguard.host.ledger import HostLedger, HostLimits
from oomguard.kinds import Provenance, Verdict
from oomguard.request import Request
from oomguard.result import (
    EngineInfo,
    FixResult,
    PlanResult,
    RankResult,
    Setting,
)

NAME = "vllm"
DISPLAY_NAME = "vLLM"
# The deployment-level knob a fix may change besides vLLM's flags (how many engines share a GPU).
REPLICAS = "replicas_per_gpu"


def _merge(base: ServeArgs, given: ServeArgs) -> ServeArgs:
    return base.merged_with(given)


# Shorthands `oomguard plan MODEL --tp 2` accepts for vLLM's flags (vLLM itself spells -tp, -pp, -dp, -ep).
DIRECT_SHORTHANDS = {"--tp": "-tp", "--pp": "-pp", "--dp": "-dp", "--ep": "--enable-expert-parallel"}


def _expand_shorthand(token: str) -> str:
    name, has_value, value = token.partition("=")
    if name not in DIRECT_SHORTHANDS:
        return token
    return DIRECT_SHORTHANDS[name] + (f"={value}" if has_value else "")


def serve_args(request: Request) -> ServeArgs:
    """The flags given to oomguard directly, then the `vllm serve` command (which wins)."""
    direct = [_expand_shorthand(t) for t in request.direct_args]
    args = parse_serve_command(["vllm", "serve", *direct]) if direct else None
    if request.command:
        given = parse_serve_command(request.command)
        args = _merge(args, given) if args is not None else given
    return args or ServeArgs(None, {})


def native_request(request: Request) -> PlanRequest:
    """The neutral request as vLLM's planner takes it."""
    return PlanRequest(
        model=request.model,
        gpu=request.gpu,
        gpu_memory=request.gpu_memory,
        flags=dict(request.flags),
        args=serve_args(request),
        vllm_version=request.engine_version or NEWEST_KNOWN,
        replicas_per_gpu=request.replicas_per_gpu,
        usage=request.usage,
        measured=dict(request.measured),
        used_by_other_processes=request.used_by_other_processes,
        other_processes_source=request.other_processes_source,
        safety_bytes=request.safety_bytes,
        host=request.host,
        local_gpus=request.local_gpus,
    )


def with_flags(request: PlanRequest, flags: Mapping[str, Any]) -> PlanRequest:
    """vLLM's flags changed, and `replicas_per_gpu` (the deployment's, not a flag)."""
    engine_flags = {k: v for k, v in flags.items() if k != REPLICAS}
    changed = request.with_flags(**engine_flags) if engine_flags else request
    if REPLICAS in flags:
        changed = replace(changed, replicas_per_gpu=int(flags[REPLICAS]))
    return changed


def is_vllm_command(argv: Sequence[str]) -> bool:
    """`vllm serve`, `python -m vllm.entrypoints...`, the vllm-openai image."""
    words = list(argv)
    for i, word in enumerate(words[:12]):
        if word == "serve" and i > 0 and Path(words[i - 1]).name == "vllm":
            return True
        if word.startswith(("vllm.entrypoints", "vllm/vllm")) or "vllm-openai" in word:
            return True
    return False


# ---------------------------------------------------------------------------------------------------------
# The neutral result
# ---------------------------------------------------------------------------------------------------------


def _settings(result: Plan) -> tuple[Setting, ...]:
    cfg = result.engine
    why = cfg.defaults
    values: dict[str, Any] = {
        "tensor_parallel_size": cfg.tensor_parallel_size,
        "pipeline_parallel_size": cfg.pipeline_parallel_size,
        "data_parallel_size": cfg.data_parallel_size,
        "enable_expert_parallel": cfg.enable_expert_parallel,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "kv_cache_memory_bytes": cfg.kv_cache_memory_bytes,
        "max_model_len": cfg.max_model_len,
        "max_num_seqs": cfg.max_num_seqs,
        "max_num_batched_tokens": cfg.max_num_batched_tokens,
        "block_size": cfg.block_size,
        "dtype": cfg.dtype,
        "quantization": cfg.quantization,
        "kv_cache_dtype": cfg.kv_cache_dtype,
        "enforce_eager": cfg.enforce_eager,
        "cudagraph_capture_sizes": len(cfg.cudagraph_capture_sizes),
    }
    return tuple(Setting(name, value, why.get(name)) for name, value in values.items())


def _headline(result: Plan) -> tuple[str, ...]:
    cfg = result.engine
    parts = [
        f"TP {cfg.tensor_parallel_size}",
        f"PP {cfg.pipeline_parallel_size}",
        f"DP {cfg.data_parallel_size}",
    ]
    if cfg.enable_expert_parallel:
        parts.append("EP")
    if cfg.replicas_per_gpu > 1:
        parts.append(f"{cfg.replicas_per_gpu} replicas/GPU")
    parts.append(cfg.dtype)
    if result.model.quantization:
        parts.append(result.model.quantization.method)
    parts += [
        f"KV {cfg.kv_cache_dtype}",
        f"max_model_len {cfg.max_model_len:,}",
        f"max_num_seqs {cfg.max_num_seqs:,}",
        f"max_num_batched_tokens {cfg.max_num_batched_tokens:,}",
        f"utilization {cfg.gpu_memory_utilization}",
    ]
    return tuple(parts)


def _legacy_json(result: Plan) -> dict[str, Any]:
    """The `engine` keys vLLM plans had before the neutral shape (kept: scripts read them)."""
    cfg = result.engine
    return {
        "vllm_version": cfg.vllm_version,
        "tensor_parallel_size": cfg.tensor_parallel_size,
        "pipeline_parallel_size": cfg.pipeline_parallel_size,
        "data_parallel_size": cfg.data_parallel_size,
        "enable_expert_parallel": cfg.enable_expert_parallel,
        "replicas_per_gpu": cfg.replicas_per_gpu,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "max_model_len": cfg.max_model_len,
        "max_num_seqs": cfg.max_num_seqs,
        "max_num_batched_tokens": cfg.max_num_batched_tokens,
        "block_size": cfg.block_size,
        "kv_cache_dtype": cfg.kv_cache_dtype,
        "enforce_eager": cfg.enforce_eager,
        "cudagraph_capture_sizes": len(cfg.cudagraph_capture_sizes),
        "defaults": dict(cfg.defaults),
        "unknown_flags": list(cfg.unknown_flags),
    }


def _rank(rank: RankLedger, result: Plan) -> RankResult:
    cfg = result.engine
    p = rank.placement
    forced_pool = cfg.kv_cache_memory_bytes is not None
    budget_label = (
        "budget: KV bytes + the rest"
        if forced_pool
        else f"budget: ceil({cfg.gpu_memory_utilization} x total)"
    )
    return RankResult(
        label=p.label,
        pp_rank=p.pp_rank,
        layers=(p.layer_start, p.layer_end),
        ep_rank=p.ep_rank,
        budget_bytes=rank.budget_bytes,
        budget_label=budget_label,
        budget_kind=Provenance.DERIVED if forced_pool else Provenance.EXACT,
        weights=rank.weights,
        activation=rank.activation,
        non_torch=rank.non_torch,
        comm_buffers=rank.comm_buffers,
        cuda_graphs=rank.cuda_graphs,
        context_bytes=rank.context_bytes,
        available_kv_bytes=rank.available_kv_bytes,
        kv_cache_bytes=rank.kv_cache_bytes,
        num_blocks=rank.num_gpu_blocks,
        bytes_per_block=rank.layout.bytes_per_block,
        pool_label=f"{rank.num_gpu_blocks:,} blocks",
        gpu=rank.gpu,
    )


def to_result(
    result: Plan, fixes: tuple[FixResult, ...] = (), at_lengths: tuple[int, ...] = ()
) -> PlanResult:
    cfg = result.engine
    rank0 = result.rank0
    log_lines = (
        startup_lines(
            cfg,
            weights=rank0.weights.bytes,
            available_kv=rank0.available_kv_bytes,
            num_blocks=result.kv.num_gpu_blocks,
            kv_tokens=result.kv.kv_cache_tokens,
            max_concurrency=result.kv.max_concurrency,
            cuda_graphs=rank0.cuda_graphs.bytes,
            total_bytes=result.gpu.total_bytes,
        )
        if result.fits
        else []
    )
    return plan_result(
        result,
        engine=EngineInfo(
            name=NAME,
            display_name=DISPLAY_NAME,
            version=cfg.vllm_version,
            settings=_settings(result),
            headline=_headline(result),
            request_length=cfg.max_model_len,
            total_gpus=cfg.total_gpus,
            world_size=cfg.world_size,
            unknown_flags=tuple(cfg.unknown_flags),
            defaults=dict(cfg.defaults),
            legacy_json=_legacy_json(result),
        ),
        dtype=cfg.dtype,
        ranks=tuple(_rank(r, result) for r in result.ranks),
        fixes=fixes,
        longest_request=vllm_fixes.longest_max_model_len(result),
        concurrency_at_length=tuple((n, vllm_fixes.concurrency_at(result, n)) for n in at_lengths),
        log_lines=tuple(log_lines),
        host=plan_host(result),
    )


def plan_host(result: Plan) -> HostLedger:
    """The node's host-memory ledger, from the GPU ledger's per-stage weights and use."""
    stages: dict[int, tuple[int, int]] = {}
    for rank in result.ranks:
        weights, used = stages.get(rank.placement.pp_rank, (0, 0))
        stages[rank.placement.pp_rank] = (max(weights, rank.weights.bytes), max(used, rank.gpu.used_bytes))
    ordered = [stages[k] for k in sorted(stages)]
    request = result.request
    inputs = plan_host_inputs(
        result.engine,
        result.model,
        request.host or HostLimits(),
        stage_weights=[w for w, _ in ordered],
        stage_gpu_used=[u for _, u in ordered],
        unified_memory=result.gpu.unified_memory,
        local_gpus=request.local_gpus,
    )
    return host_ledger(result.engine, inputs)


# ---------------------------------------------------------------------------------------------------------
# The planner the planning package dispatches to
# ---------------------------------------------------------------------------------------------------------


class VllmPlanner:
    name = NAME
    display_name = DISPLAY_NAME

    def is_command(self, argv: Sequence[str]) -> bool:
        return is_vllm_command(argv)

    def knows_setting(self, name: str) -> bool:
        return is_known_field(name) or name == REPLICAS

    def setting_names(self) -> tuple[str, ...]:
        return tuple(spec.field for spec in MEMORY_FLAGS)

    def plan(self, request: Request) -> Plan:
        return plan(native_request(request))

    def replan(self, base: Plan, flags: Mapping[str, Any]) -> Plan:
        return plan(with_flags(base.request, flags))

    def fits(self, candidate: Plan) -> bool:
        """A fix must start with margin (a fix that leaves 1.0x concurrency is not one)."""
        return candidate.verdict == Verdict.FITS

    def candidates(self, base: Plan) -> list[FixCandidate]:
        return vllm_fixes.fix_candidates(base)

    def follow_up(
        self, base: Plan, trial: Plan, flags: Mapping[str, Any], pinned: frozenset[str]
    ) -> Mapping[str, Any] | None:
        return vllm_fixes.follow_up(base, trial, flags, pinned)

    def fix_result(
        self, base: Plan, fixed: Plan, candidate: FixCandidate, flags: Mapping[str, Any]
    ) -> FixResult:
        args = fixed.engine.args
        added = "".join(
            f", with --{k.replace('_', '-')} {v}" for k, v in flags.items() if k not in candidate.flags
        )
        return FixResult(
            flags=dict(flags),
            summary=candidate.summary + added,
            cost=vllm_fixes.describe(base, fixed),
            command=" ".join(args.to_argv()) if args else "",
            kv_cache_tokens=fixed.kv.kv_cache_tokens,
            max_concurrency=fixed.kv.max_concurrency,
            max_model_len=fixed.engine.max_model_len,
            gpus=fixed.engine.total_gpus,
        )

    def fix_order(self, fix: FixResult, fixed: Plan) -> tuple[float, ...]:
        return vllm_fixes.fix_order(fix, fixed)

    def to_result(
        self, result: Plan, fixes: tuple[FixResult, ...], at_lengths: tuple[int, ...]
    ) -> PlanResult:
        return to_result(result, fixes, at_lengths)


PLANNER = VllmPlanner()
