"""`oomguard plan` in the terminal: the verdict first, then the per-GPU ledger a person reads at a glance."""

from __future__ import annotations

import os
import sys
from typing import TextIO

from oomguard.kinds import Provenance, Verdict
from oomguard.ledger import LINE_LABELS, LedgerLine
from oomguard.planning.margin import Margin
from oomguard.planning.planner import RankLedger
from oomguard.planning.report import PlanReport
from oomguard.units import GiB

BAR_WIDTH = 60
# The source column is cut here (with an ellipsis) unless --verbose asks for it whole.
DETAIL_WIDTH = 80
BAR_GLYPHS = {
    "weights": "W",
    "kv_cache": "K",
    "activation": "A",
    "comm_buffers": "E",
    "cuda_graph": "G",
    "non_torch": "N",
    "cuda_context": "C",
    "other_processes": "O",
}


class Style:
    def __init__(self, stream: TextIO) -> None:
        self.on = stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"

    def _wrap(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.on else text

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def good(self, text: str) -> str:
        return self._wrap("1;32", text)

    def bad(self, text: str) -> str:
        return self._wrap("1;31", text)

    def warn(self, text: str) -> str:
        return self._wrap("33", text)

    def dim(self, text: str) -> str:
        return self._wrap("2", text)


def _g(num_bytes: float) -> str:
    return f"{num_bytes / GiB:8.2f}"


def _kind(line: LedgerLine) -> str:
    if line.kind == Provenance.ESTIMATED and line.band:
        return f"est ±{line.band / GiB:.2f}"
    return line.kind


def _bar(rank: RankLedger) -> str:
    total = rank.gpu.total_bytes
    cells: list[str] = []
    for line in rank.gpu.lines:
        # NOTE: absurd inputs (1e23 tokens) give lines many times the device; the bar shows at most its width.
        n = min(BAR_WIDTH, max(0, round(line.bytes * rank.gpu.replicas / total * BAR_WIDTH)))
        cells.append(BAR_GLYPHS.get(line.key, "?") * n)
    bar = "".join(cells)[:BAR_WIDTH]
    return "[" + bar + "." * (BAR_WIDTH - len(bar)) + "]"


def _detail(text: str, verbose: bool) -> str:
    """The source column: whole with --verbose, else cut at DETAIL_WIDTH with an ellipsis."""
    if verbose or len(text) <= DETAIL_WIDTH:
        return text
    return text[: DETAIL_WIDTH - 3] + "..."


def _deployment_text(report: PlanReport) -> str:
    plan = report.plan
    dp = plan.engine.data_parallel_size
    return (
        f"  per DP replica; the deployment's {dp} replicas hold {dp * plan.kv.kv_cache_tokens:,} KV tokens, "
        f"{dp * plan.kv.max_concurrency:.2f}x concurrency, on {plan.engine.total_gpus} GPUs"
    )


def _margin_text(margin: Margin, marginal: bool) -> str:
    what = "its estimates' bands" if margin.required_bytes == margin.band_bytes else "--safety"
    text = (
        f"  margin: {margin.slack_bytes / GiB:.2f} GiB to spare on {margin.constraint} ({margin.rank}); "
        f"{what} ask {margin.required_bytes / GiB:.2f} GiB"
    )
    if marginal:
        text += ": it may not start (check fails on it unless --allow-marginal)"
    return text


def _total_kind(report: PlanReport) -> str:
    gpu = report.plan.gpu
    if gpu.total_kind == "estimated":
        return f"est ±{gpu.total_band / GiB:.2f}"
    return gpu.total_kind


def _ledger(rank: RankLedger, report: PlanReport, style: Style, verbose: bool = False) -> list[str]:
    cfg = report.plan.engine
    out = [style.bold(f"Per-GPU ledger, {rank.placement.label}") + style.dim("   (GiB)")]
    out.append(
        f"  {'device total (what CUDA reports)':<38}{_g(rank.gpu.total_bytes)}  {_total_kind(report):<9} "
        + style.dim(_detail(report.plan.gpu.total_source, verbose))
    )
    budget_text = (
        f"budget: ceil({cfg.gpu_memory_utilization} x total)"
        if cfg.kv_cache_memory_bytes is None
        else "budget: KV bytes + the rest"
    )
    budget_kind = (
        Provenance.DERIVED
        if report.budget_label or cfg.kv_cache_memory_bytes is not None
        else Provenance.EXACT
    )
    out.append(f"  {report.budget_label or budget_text:<38}{_g(rank.budget_bytes)}  {budget_kind}")
    for line in rank.gpu.lines:
        label = LINE_LABELS.get(line.key, line.key)
        if line.key == "kv_cache":
            label += f" ({rank.num_gpu_blocks:,} blocks)"
        prefix = "    " if line.in_budget else "  + outside budget: "
        width = 36 if line.in_budget else 20
        out.append(
            f"{prefix}{label:<{width}}{_g(line.bytes)}  {_kind(line):<9} "
            + style.dim(_detail(line.source, verbose))
        )
    if rank.gpu.replicas > 1:
        out.append(f"  x {rank.gpu.replicas} replicas on this GPU{'':<14}{_g(rank.gpu.used_bytes)}")
    free = rank.gpu.free_bytes
    text = f"  {'free at peak':<38}{_g(free)}"
    out.append(style.bad(text) if free < 0 else text)
    out.append(
        "  "
        + _bar(rank)
        + style.dim(
            "  W weights K KV A activation E EP G graphs N non-torch C context"
            + (" O other processes" if rank.gpu.line("other_processes") else "")
        )
    )
    return out


def render_plan(report: PlanReport, stream: TextIO | None = None, *, verbose: bool = False) -> str:
    stream = stream or sys.stdout
    style = Style(stream)
    plan = report.plan
    cfg = plan.engine
    rank0 = plan.rank0
    gpus = cfg.total_gpus
    lines = [
        style.bold(f"{plan.model.name}")
        + f" on {gpus} x {plan.gpu.name} ({plan.gpu.total_bytes / GiB:.2f} GiB), "
        f"{report.engine_name} {cfg.vllm_version}",
        style.dim(
            f"  TP {cfg.tensor_parallel_size} · PP {cfg.pipeline_parallel_size} · DP {cfg.data_parallel_size}"
            + (" · EP" if cfg.enable_expert_parallel else "")
            + (f" · {cfg.replicas_per_gpu} replicas/GPU" if cfg.replicas_per_gpu > 1 else "")
            + f" · {cfg.dtype}"
            + (f" · {plan.model.quantization.method}" if plan.model.quantization else "")
            + f" · KV {cfg.kv_cache_dtype} · max_model_len {cfg.max_model_len:,} · max_num_seqs {cfg.max_num_seqs:,}"
            f" · max_num_batched_tokens {cfg.max_num_batched_tokens:,} · utilization {cfg.gpu_memory_utilization}"
        ),
        "",
    ]
    if report.fewest is not None:
        lines += [style.bold(f"fewest: {report.fewest[0]} GPUs"), f"  {report.fewest[1]}", ""]
    if plan.fits:
        marginal = report.verdict == Verdict.MARGINAL
        lines.append(
            (style.warn("MARGINAL") if marginal else style.good("FITS"))
            + f"  KV cache {rank0.available_kv_bytes / GiB:.2f} GiB = "
            f"{plan.kv.kv_cache_tokens:,} tokens; {plan.kv.max_concurrency:.2f}x concurrency at "
            f"{cfg.max_model_len:,} tokens per request"
        )
        if cfg.data_parallel_size > 1:
            lines.append(_deployment_text(report))
        if plan.margin is not None:
            lines.append(_margin_text(plan.margin, marginal))
    else:
        lines.append(style.bad("WILL NOT START") + f"  ({plan.failure})")
        for error in plan.errors:
            lines.append(f"  {report.engine_name} would fail: " + error)
    for warning in plan.warnings:
        lines.append(style.warn("  warning: ") + warning)
    lines.append("")
    ranks = plan.ranks if verbose else plan.ranks[:1]
    for rank in ranks:
        lines += _ledger(rank, report, style, verbose)
        lines.append("")
    if len(plan.ranks) > 1 and not verbose:
        others = ", ".join(
            f"{r.placement.label}: KV {r.available_kv_bytes / GiB:.2f} GiB" for r in plan.ranks[1:]
        )
        lines.append(style.dim(f"  other ranks ({others}); --verbose shows their ledgers"))
        lines.append("")
    if report.log_lines:
        lines.append(
            style.bold(f"{report.engine_name} should log")
            + style.dim(" (rank 0; compare with your server's log)")
        )
        lines += ["  " + line for line in report.log_lines]
        lines.append("")
    group_text = ", ".join(
        f"{g.num_layers} {g.kind}" + (f" (window {g.sliding_window})" if g.sliding_window else "")
        for g in plan.kv.groups[:6]
    ) + (" ..." if len(plan.kv.groups) > 6 else "")
    lines.append(
        style.bold("KV cache") + f"  {plan.kv.bytes_per_block:,} B per block of {plan.kv.block_size} tokens "
        f"({len(plan.kv.groups)} group{'s' if len(plan.kv.groups) != 1 else ''}: {group_text}); "
        f"{plan.kv.blocks_per_request:,} blocks per {cfg.max_model_len:,}-token request"
    )
    limit = plan.model.max_position_embeddings
    longest = report.longest_max_model_len
    lines.append(
        f"  longest max_model_len one request can use: {longest:,}"
        + (" (the model's limit)" if longest >= limit else "")
    )
    for length, conc in report.concurrency_at_length:
        lines.append(f"  concurrency at {length:,} tokens per request: {conc:.2f}x")
    if report.fixes:
        lines.append("")
        lines.append(style.bold("Fixes") + style.dim(" (each re-planned and verified; cheapest first)"))
        for i, fix in enumerate(report.fixes, 1):
            lines.append(f"  {i}. {fix.summary}")
            lines.append(style.dim(f"     cost: {fix.cost}"))
            lines.append(style.dim(f"     {fix.command()}"))
    elif not plan.fits:
        lines.append("")
        lines.append(style.warn("No single flag change makes this fit; try a larger GPU or more of them."))
    if verbose:
        lines.append("")
        lines.append(style.bold("Why each setting has its value"))
        for name, why in cfg.defaults.items():
            lines.append(f"  {name}: {why}")
    for note in plan.notes:
        lines.append(style.dim("note: " + note))
    return "\n".join(lines) + "\n"
