"""SGLang as the planning package sees it: a neutral request in, SGLang's own plan, its fixes, the neutral
result (settings under ServerArgs names, the static share as the budget, the pool counted in tokens)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from oomguard.engines.base import FixCandidate
from oomguard.engines.common import plan_result
from oomguard.engines.sglang import fixes as sglang_fixes
from oomguard.engines.sglang.config import ENGINE_VERSION, capture_batch_sizes
from oomguard.engines.sglang.flags import FLAGS, LaunchArgs, is_sglang_command, parse_launch_command
from oomguard.engines.sglang.log_format import startup_lines
from oomguard.engines.sglang.plan import (
    NOT_SEPARATE_COMM,
    NOT_SEPARATE_NON_TORCH,
    SglangPlan,
    SglangRank,
    SglangRequest,
    plan_sglang,
)
from oomguard.errors import ConfigError
from oomguard.kinds import Provenance, Usage, Verdict
from oomguard.request import Request
from oomguard.result import (
    EngineInfo,
    FixResult,
    PlanResult,
    RankResult,
    Setting,
)

NAME = "sglang"
DISPLAY_NAME = "SGLang"


def launch_args(request: Request) -> LaunchArgs:
    """The flags given to oomguard directly, then the launch command (which wins)."""
    args = parse_launch_command(["sglang", "serve", *request.direct_args]) if request.direct_args else None
    if request.command:
        given = parse_launch_command(request.command)
        args = args.merged_with(given) if args is not None else given
    return args or LaunchArgs(None, {})


def native_request(request: Request) -> SglangRequest:
    if request.measured or request.usage != Usage.SERVE or request.replicas_per_gpu != 1:
        raise ConfigError("--calibrate, --llm and --replicas-per-gpu are vLLM-only for now")
    return SglangRequest(
        model=request.model,
        gpu=request.gpu,
        gpu_memory=request.gpu_memory,
        flags=dict(request.flags),
        args=launch_args(request),
        used_by_other_processes=request.used_by_other_processes,
        safety_bytes=request.safety_bytes,
    )


def _settings(result: SglangPlan) -> tuple[Setting, ...]:
    cfg = result.engine
    why = cfg.defaults
    values: dict[str, Any] = {
        "tp_size": cfg.tp_size,
        "pp_size": cfg.pp_size,
        "dp_size": cfg.dp_size,
        "ep_size": cfg.ep_size,
        "enable_dp_attention": cfg.enable_dp_attention,
        "mem_fraction_static": cfg.mem_fraction_static,
        "context_length": cfg.context_length,
        "chunked_prefill_size": cfg.chunked_prefill_size,
        "max_prefill_tokens": cfg.max_prefill_tokens,
        "cuda_graph_max_bs": cfg.cuda_graph_max_bs,
        "cuda_graph_batch_sizes": 0
        if cfg.disable_cuda_graph
        else len(capture_batch_sizes(cfg.cuda_graph_max_bs, cfg.speculative_algorithm is not None)),
        "disable_cuda_graph": cfg.disable_cuda_graph,
        "max_running_requests": cfg.max_running_requests,
        "max_total_tokens": cfg.max_total_tokens,
        "page_size": cfg.page_size,
        "dtype": cfg.dtype,
        "quantization": cfg.quantization,
        "kv_cache_dtype": cfg.kv_cache_dtype,
    }
    return tuple(Setting(name, value, why.get(name)) for name, value in values.items())


def _headline(result: SglangPlan) -> tuple[str, ...]:
    cfg = result.engine
    parts = [f"TP {cfg.tp_size}", f"PP {cfg.pp_size}", f"DP {cfg.dp_size}"]
    if cfg.ep_size > 1:
        parts.append(f"EP {cfg.ep_size}")
    if cfg.enable_dp_attention:
        parts.append("DP attention")
    parts.append(cfg.dtype)
    if result.model.quantization:
        parts.append(result.model.quantization.method)
    parts += [
        f"KV {cfg.kv_cache_dtype}",
        f"context_length {cfg.context_length:,}",
        f"max_running_requests {cfg.max_running_requests or 0:,}",
        f"chunked_prefill_size {cfg.chunked_prefill_size:,}",
        f"mem_fraction_static {cfg.mem_fraction_static}",
    ]
    return tuple(parts)


def _rank(rank: SglangRank, result: SglangPlan) -> RankResult:
    p = rank.placement
    tokens = rank.num_gpu_blocks * result.engine.page_size
    return RankResult(
        label=p.label,
        pp_rank=p.pp_rank,
        layers=(p.layer_start, p.layer_end),
        ep_rank=p.ep_rank,
        budget_bytes=rank.budget_bytes,
        budget_label=f"static share: {result.engine.mem_fraction_static} x free at init",
        budget_kind=Provenance.DERIVED,
        weights=rank.weights,
        activation=rank.activation,
        non_torch=NOT_SEPARATE_NON_TORCH,
        comm_buffers=NOT_SEPARATE_COMM,
        cuda_graphs=rank.cuda_graphs,
        context_bytes=rank.init.bytes,
        available_kv_bytes=rank.available_kv_bytes,
        kv_cache_bytes=rank.kv_cache_bytes,
        num_blocks=rank.num_gpu_blocks,
        bytes_per_block=rank.layout.bytes_per_block,
        pool_label=f"{tokens:,} tokens",
        gpu=rank.gpu,
    )


def to_result(
    result: SglangPlan, fixes: tuple[FixResult, ...] = (), at_lengths: tuple[int, ...] = ()
) -> PlanResult:
    cfg = result.engine
    rank0 = result.rank0
    lines: list[str] = []
    if result.fits:
        lines = startup_lines(
            cfg,
            architecture=result.model.architecture,
            free_at_init=rank0.free_at_init,
            weights=rank0.weights.bytes,
            pool=rank0.layout,
            tokens=result.kv.kv_cache_tokens,
            split=result.kv.swa,
            kv_bytes=rank0.kv_cache_bytes,
            req_to_token=rank0.req_to_token_bytes,
            cuda_graphs=rank0.cuda_graphs.bytes,
            max_running=result.kv.max_running_requests,
        )
    tokens = result.kv.kv_cache_tokens
    return plan_result(
        result,
        engine=EngineInfo(
            name=NAME,
            display_name=DISPLAY_NAME,
            version=ENGINE_VERSION,
            settings=_settings(result),
            headline=_headline(result),
            request_length=cfg.context_length,
            total_gpus=cfg.total_gpus,
            world_size=cfg.tp_size * cfg.pp_size,
            unknown_flags=tuple(cfg.args.unknown_flags),
            defaults=dict(cfg.defaults),
        ),
        dtype=cfg.dtype,
        ranks=tuple(_rank(r, result) for r in result.ranks),
        fixes=fixes,
        longest_request=sglang_fixes.longest_context(result),
        concurrency_at_length=tuple((n, tokens / n if n > 0 else 0.0) for n in at_lengths),
        log_lines=tuple(lines),
    )


class SglangPlanner:
    name = NAME
    display_name = DISPLAY_NAME

    def is_command(self, argv: Sequence[str]) -> bool:
        return is_sglang_command(argv)

    def knows_setting(self, name: str) -> bool:
        return name in FLAGS

    def setting_names(self) -> tuple[str, ...]:
        return tuple(FLAGS)

    def plan(self, request: Request) -> SglangPlan:
        return plan_sglang(native_request(request))

    def replan(self, base: SglangPlan, flags: Mapping[str, Any]) -> SglangPlan:
        return plan_sglang(base.request.with_flags(**flags))

    def fits(self, candidate: SglangPlan) -> bool:
        """A fix must start with margin and leave no warning (thin headroom or a short pool)."""
        return candidate.verdict == Verdict.FITS and not candidate.warnings

    def candidates(self, base: SglangPlan) -> list[FixCandidate]:
        return sglang_fixes.fix_candidates(base)

    def follow_up(
        self, base: SglangPlan, trial: SglangPlan, flags: Mapping[str, Any], pinned: frozenset[str]
    ) -> Mapping[str, Any] | None:
        """SGLang's candidates stand alone: none needs a second setting to start."""
        return None

    def fix_result(
        self, base: SglangPlan, fixed: SglangPlan, candidate: FixCandidate, flags: Mapping[str, Any]
    ) -> FixResult:
        return FixResult(
            flags=dict(flags),
            summary=candidate.summary,
            cost=sglang_fixes.describe(base, fixed),
            command=" ".join(fixed.engine.args.to_argv()),
            kv_cache_tokens=fixed.kv.kv_cache_tokens,
            max_concurrency=fixed.kv.max_concurrency,
            max_model_len=fixed.engine.context_length,
            gpus=fixed.engine.total_gpus,
        )

    def fix_order(self, fix: FixResult, fixed: SglangPlan) -> tuple[float, ...]:
        return (fix.gpus, -fix.max_model_len, -fix.kv_cache_tokens)

    def to_result(
        self, result: SglangPlan, fixes: tuple[FixResult, ...], at_lengths: tuple[int, ...]
    ) -> PlanResult:
        return to_result(result, fixes, at_lengths)


PLANNER = SglangPlanner()
