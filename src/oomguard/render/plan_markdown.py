"""`oomguard plan --markdown`: the verdict and ledger as a table to paste into an issue or a PR."""

from __future__ import annotations

from oomguard.ledger import LINE_LABELS
from oomguard.planning.report import PlanReport
from oomguard.units import GiB


def render_plan_markdown(report: PlanReport) -> str:
    plan = report.plan
    cfg = plan.engine
    rank = plan.rank0
    verdict = f"**{report.verdict}**" if plan.fits else f"**will not start** ({plan.failure})"
    out = [
        (
            f"### oomguard plan: `{plan.model.name}` on {cfg.total_gpus} x {plan.gpu.name}, "
            f"{report.engine_name} {cfg.vllm_version}"
        ),
        "",
        (
            f"Verdict: {verdict}. KV cache {rank.available_kv_bytes / GiB:.2f} GiB = {plan.kv.kv_cache_tokens:,} tokens, "
            f"{plan.kv.max_concurrency:.2f}x concurrency at {cfg.max_model_len:,} tokens."
        ),
        "",
    ]
    for error in plan.errors:
        out += [f"> {report.engine_name}: {error}", ""]
    budget_row = (
        f"| {report.budget_label} | {rank.budget_bytes / GiB:.2f} | derived | |"
        if report.budget_label
        else f"| budget (u = {cfg.gpu_memory_utilization}) | {rank.budget_bytes / GiB:.2f} | exact | ceil(total x u) |"
    )
    out += [
        "| line | GiB | kind | source |",
        "|---|---:|---|---|",
        f"| device total | {rank.gpu.total_bytes / GiB:.2f} | {plan.gpu.total_kind} | {plan.gpu.total_source} |",
        budget_row,
    ]
    for line in rank.gpu.lines:
        where = "" if line.in_budget else " (outside budget)"
        kind = f"{line.kind} ±{line.band / GiB:.2f}" if line.band else line.kind
        out.append(
            f"| {LINE_LABELS.get(line.key, line.key)}{where} | {line.bytes / GiB:.2f} | {kind} | "
            f"{line.source.replace('|', '/')} |"
        )
    out.append(f"| free at peak | {rank.gpu.free_bytes / GiB:.2f} | derived | |")
    if report.log_lines:
        out += ["", f"{report.engine_name} should log:", "```"] + list(report.log_lines) + ["```"]
    if report.fixes:
        out += ["", "Fixes (re-planned and verified):", ""]
        for fix in report.fixes:
            out.append(f"- {fix.summary} — cost: {fix.cost}  \n  `{fix.command()}`")
    for warning in plan.warnings:
        out.append(f"\n> warning: {warning}")
    return "\n".join(out) + "\n"
