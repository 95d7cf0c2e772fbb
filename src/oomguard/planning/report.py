"""Everything `oomguard plan` shows, computed once: the plan, its fixes, the inverse answers, the log lines.

Renderers read a PlanReport and never compute.
"""

from __future__ import annotations

from dataclasses import dataclass

from oomguard.engines.vllm.log_lines import startup_lines
from oomguard.kinds import Verdict
from oomguard.planning.advise import Fix, concurrency_at, longest_max_model_len, suggest_fixes
from oomguard.planning.planner import Plan


@dataclass(frozen=True)
class PlanReport:
    plan: Plan
    fixes: tuple[Fix, ...]
    longest_max_model_len: int
    concurrency_at_length: tuple[tuple[int, float], ...]
    log_lines: tuple[str, ...]
    engine_name: str = "vLLM"  # whose plan this is (the SGLang planner sets "SGLang")
    budget_label: str | None = None  # how the engine's budget is defined, when not vLLM's ceil(u x total)
    fewest: tuple[int, str] | None = None  # --fewest-gpus: (GPUs, the ready-to-run command)

    @property
    def fits(self) -> bool:
        return self.plan.fits

    @property
    def verdict(self) -> Verdict:
        return self.plan.verdict


def build_report(result: Plan, *, fixes: bool = True, at_lengths: tuple[int, ...] = ()) -> PlanReport:
    rank0 = result.rank0
    lines = (
        startup_lines(
            result.engine,
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
    want_fixes = fixes and (result.verdict != Verdict.FITS or bool(result.warnings))
    return PlanReport(
        plan=result,
        fixes=tuple(suggest_fixes(result)) if want_fixes else (),
        longest_max_model_len=longest_max_model_len(result),
        concurrency_at_length=tuple((n, concurrency_at(result, n)) for n in at_lengths),
        log_lines=tuple(lines),
    )
