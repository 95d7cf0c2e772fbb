"""`oomguard plan` in the terminal: the verdict first, then the per-GPU ledger a person reads at a glance."""

from __future__ import annotations

import os
import sys
from typing import TextIO

from oomguard.kinds import Provenance, Verdict
from oomguard.ledger import KV_CACHE, LINE_LABELS, OTHER_PROCESSES, LedgerLine
from oomguard.margin import Margin
from oomguard.render.host_text import host_section
from oomguard.result import PlanResult, RankResult
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


def _bar(rank: RankResult) -> str:
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


def _data_parallel(plan: PlanResult) -> int:
    try:
        return int(plan.engine.setting("data_parallel_size"))
    except (KeyError, TypeError, ValueError):
        return 1


def _deployment_text(plan: PlanResult) -> str:
    dp = _data_parallel(plan)
    return (
        f"  per DP replica; the deployment's {dp} replicas hold {dp * plan.kv.tokens:,} KV tokens, "
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


def _total_kind(plan: PlanResult) -> str:
    gpu = plan.gpu
    if gpu.total_kind == Provenance.ESTIMATED:
        return f"est ±{gpu.total_band / GiB:.2f}"
    return str(gpu.total_kind)


def _ledger(rank: RankResult, plan: PlanResult, style: Style, verbose: bool = False) -> list[str]:
    out = [style.bold(f"Per-GPU ledger, {rank.label}") + style.dim("   (GiB)")]
    out.append(
        f"  {'device total (what CUDA reports)':<38}{_g(rank.gpu.total_bytes)}  {_total_kind(plan):<9} "
        + style.dim(_detail(plan.gpu.total_source, verbose))
    )
    out.append(f"  {rank.budget_label:<38}{_g(rank.budget_bytes)}  {rank.budget_kind}")
    for line in rank.gpu.lines:
        label = LINE_LABELS.get(line.key, line.key)
        if line.key == KV_CACHE:
            label += f" ({rank.pool_label})"
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
            + (" O other processes" if rank.gpu.line(OTHER_PROCESSES) else "")
        )
    )
    return out


def render_plan(plan: PlanResult, stream: TextIO | None = None, *, verbose: bool = False) -> str:
    stream = stream or sys.stdout
    style = Style(stream)
    engine = plan.engine
    rank0 = plan.rank0
    length = engine.request_length
    lines = [
        style.bold(f"{plan.model.name}")
        + f" on {engine.total_gpus} x {plan.gpu.name} ({plan.gpu.total_bytes / GiB:.2f} GiB), "
        f"{engine.display_name} {engine.version}",
        style.dim("  " + " · ".join(engine.headline)),
        "",
    ]
    if plan.fewest is not None:
        lines += [style.bold(f"fewest: {plan.fewest[0]} GPUs"), f"  {plan.fewest[1]}", ""]
    if plan.fits:
        marginal = plan.verdict == Verdict.MARGINAL
        lines.append(
            (style.warn("MARGINAL") if marginal else style.good("FITS"))
            + f"  KV cache {rank0.available_kv_bytes / GiB:.2f} GiB = "
            f"{plan.kv.tokens:,} tokens; {plan.kv.max_concurrency:.2f}x concurrency at "
            f"{length:,} tokens per request"
        )
        if _data_parallel(plan) > 1:
            lines.append(_deployment_text(plan))
        if plan.margin is not None:
            lines.append(_margin_text(plan.margin, marginal))
    else:
        lines.append(style.bad("WILL NOT START") + f"  ({plan.failure})")
        for error in plan.errors:
            lines.append(f"  {engine.display_name} would fail: " + error)
    for warning in plan.warnings:
        lines.append(style.warn("  warning: ") + warning)
    lines.append("")
    ranks = plan.ranks if verbose else plan.ranks[:1]
    for rank in ranks:
        lines += _ledger(rank, plan, style, verbose)
        lines.append("")
    if len(plan.ranks) > 1 and not verbose:
        others = ", ".join(f"{r.label}: KV {r.available_kv_bytes / GiB:.2f} GiB" for r in plan.ranks[1:])
        lines.append(style.dim(f"  other ranks ({others}); --verbose shows their ledgers"))
        lines.append("")
    if plan.log_lines:
        lines.append(
            style.bold(f"{engine.display_name} should log")
            + style.dim(" (rank 0; compare with your server's log)")
        )
        lines += ["  " + line for line in plan.log_lines]
        lines.append("")
    group_text = ", ".join(
        f"{g.num_layers} {g.kind}" + (f" (window {g.sliding_window})" if g.sliding_window else "")
        for g in plan.kv.groups[:6]
    ) + (" ..." if len(plan.kv.groups) > 6 else "")
    lines.append(
        style.bold("KV cache") + f"  {plan.kv.bytes_per_block:,} B per block of {plan.kv.block_size} tokens "
        f"({len(plan.kv.groups)} group{'s' if len(plan.kv.groups) != 1 else ''}: {group_text}); "
        f"{plan.kv.blocks_per_request:,} blocks per {length:,}-token request"
    )
    limit = plan.model.max_position_embeddings
    longest = plan.longest_request
    lines.append(
        f"  longest max_model_len one request can use: {longest:,}"
        + (" (the model's limit)" if longest >= limit else "")
    )
    for at, conc in plan.concurrency_at_length:
        lines.append(f"  concurrency at {at:,} tokens per request: {conc:.2f}x")
    if plan.host is not None:
        lines.append("")
        lines += host_section(plan.host, verbose=verbose)
    if plan.fixes:
        lines.append("")
        lines.append(style.bold("Fixes") + style.dim(" (each re-planned and verified; cheapest first)"))
        for i, fix in enumerate(plan.fixes, 1):
            lines.append(f"  {i}. {fix.summary}")
            lines.append(style.dim(f"     cost: {fix.cost}"))
            lines.append(style.dim(f"     {fix.command}"))
    elif not plan.fits:
        lines.append("")
        lines.append(style.warn("No single flag change makes this fit; try a larger GPU or more of them."))
    if verbose:
        lines.append("")
        lines.append(style.bold("Why each setting has its value"))
        for name, why in engine.defaults.items():
            lines.append(f"  {name}: {why}")
    for note in plan.notes:
        lines.append(style.dim("note: " + note))
    return "\n".join(lines) + "\n"
