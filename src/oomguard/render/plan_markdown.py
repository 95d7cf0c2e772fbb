"""`oomguard plan --markdown`: the verdict and ledger as a table to paste into an issue or a PR."""

from __future__ import annotations

from oomguard.ledger import LINE_LABELS
from oomguard.render.host_text import host_section
from oomguard.result import PlanResult
from oomguard.units import GiB


def render_plan_markdown(plan: PlanResult) -> str:
    engine = plan.engine
    rank = plan.rank0
    verdict = f"**{plan.verdict.value}**" if plan.fits else f"**will not start** ({plan.failure})"
    out = [
        (
            f"### oomguard plan: `{plan.model.name}` on {engine.total_gpus} x {plan.gpu.name}, "
            f"{engine.display_name} {engine.version}"
        ),
        "",
        (
            f"Verdict: {verdict}. KV cache {rank.available_kv_bytes / GiB:.2f} GiB = {plan.kv.tokens:,} "
            "tokens, "
            f"{plan.kv.max_concurrency:.2f}x concurrency at {engine.request_length:,} tokens."
        ),
        "",
    ]
    for error in plan.errors:
        out += [f"> {engine.display_name}: {error}", ""]
    out += [
        "| line | GiB | kind | source |",
        "|---|---:|---|---|",
        f"| device total | {rank.gpu.total_bytes / GiB:.2f} | {plan.gpu.total_kind} | "  # noqa: ISC004
        f"{plan.gpu.total_source} |",
        f"| {rank.budget_label} | {rank.budget_bytes / GiB:.2f} | {rank.budget_kind} | |",
    ]
    for line in rank.gpu.lines:
        where = "" if line.in_budget else " (outside budget)"
        kind = f"{line.kind} ±{line.band / GiB:.2f}" if line.band else line.kind
        out.append(
            f"| {LINE_LABELS.get(line.key, line.key)}{where} | {line.bytes / GiB:.2f} | {kind} | "
            f"{line.source.replace('|', '/')} |"
        )
    out.append(f"| free at peak | {rank.gpu.free_bytes / GiB:.2f} | derived | |")
    if plan.log_lines:
        out += ["", f"{engine.display_name} should log:", "```"] + list(plan.log_lines) + ["```"]
    if plan.host is not None:
        out += ["", "Host memory:", "```"] + host_section(plan.host) + ["```"]
    if plan.fixes:
        out += ["", "Fixes (re-planned and verified):", ""]
        for fix in plan.fixes:
            out.append(f"- {fix.summary} — cost: {fix.cost}  \n  `{fix.command}`")
    for warning in plan.warnings:
        out.append(f"\n> warning: {warning}")
    return "\n".join(out) + "\n"
