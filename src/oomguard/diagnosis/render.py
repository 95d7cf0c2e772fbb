"""Diagnosis -> text: a terminal report read at a glance, JSON (stable keys), Markdown for an issue.
Renderers only format; every number was computed before."""

from __future__ import annotations

import json
from typing import Any

from oomguard.diagnosis.diagnosis import Cause, Diagnosis
from oomguard.diagnosis.engine_marks import Engine

# The identified engine when the setup did not name it (its fixes are in that engine's options).
_ENGINE_SHOWN = {
    Engine.UNKNOWN: "engine ? (engine-neutral fixes)",
    Engine.OTHER: "an engine without levers here (engine-neutral fixes)",
}
# Said of a cause the learned prior lists without any rule evidence for it.
PRIOR_ONLY = "from similar reports, no direct evidence"


def to_dict(d: Diagnosis) -> dict[str, Any]:
    return {
        "causes": [
            {
                "class": c.cls,
                "confidence": c.confidence,
                "explanation": c.explanation,
                "evidence": [e.as_dict() for e in c.support],
                "contradicting": [e.as_dict() for e in c.contradict],
                "fixes": [f.as_dict() for f in c.fixes],
                "does_not_help": list(c.not_helpful),
                "verify": c.verify,
                "next_evidence": c.next_evidence,
                "notes": list(c.notes),
                "from_similar_reports_only": c.from_prior,
            }
            for c in d.causes
        ],
        "phase": d.phase,
        "phase_why": d.phase_why,
        "setup": d.setup.as_dict(),
        "engine": d.engine.value,
        "memory": [{"item": k, "value": v} for k, v in d.memory],
        "questions": [{"question": q, "answer": a} for q, a in d.questions],
        "separate_top_causes_by": list(d.separate_by),
        "read": list(d.read),
        "skipped": list(d.skipped),
        "incidents": [i.as_dict() for i in d.incidents],
    }


def render_json(d: Diagnosis) -> str:
    return json.dumps(to_dict(d), indent=2)


def _setup_line(d: Diagnosis) -> str:
    s = d.setup
    parts = [
        s.engine if s.engine != "unknown" else _ENGINE_SHOWN.get(d.engine, d.engine.value),
        f"v{s.version}" if s.version else "",
        s.model or "model ?",
        s.gpu_name or (f"{s.gpu_total_bytes / (1 << 30):.2f} GiB GPU" if s.gpu_total_bytes else "GPU ?"),
    ]
    flags = ", ".join(f"{k}={v}" for k, v in list(s.flags.items())[:8] if k != "model")
    return " | ".join(p for p in parts if p) + (f" | {flags}" if flags else "")


def _incident_lines(d: Diagnosis) -> list[str]:
    return [
        f"  {i.failure}: {i.cause} ({i.confidence:.0%}, {i.phase}) from {', '.join(i.sources)}"
        for i in d.incidents
    ]


def render_text(d: Diagnosis) -> str:
    out: list[str] = []
    if d.incidents:
        out.append(f"{len(d.incidents)} incidents in the inputs, each diagnosed on its own files:")
        out += _incident_lines(d)
        out.append("All the inputs together (mixes the incidents):")
    top = d.causes[0] if d.causes else None
    if top:
        out.append(f"Most likely: {top.cls}  (confidence {top.confidence:.0%})")
        out.append(f"  {top.explanation}")
    out.append(f"Phase: {d.phase} - {d.phase_why}")
    out.append(f"Setup: {_setup_line(d)}")
    if d.memory:
        out.append("Where the memory went:")
        out += [f"  {k:<34} {v}" for k, v in d.memory]
    for i, c in enumerate(d.causes, 1):
        out.append("")
        out.append(f"{i}. {c.cls}  {c.confidence:.0%}" + (f"  ({PRIOR_ONLY})" if c.from_prior else ""))
        if i > 1:
            out.append(f"   {c.explanation}")
        last_why = ""
        for e in c.support:
            why = e.why if e.why != last_why else "(same)"
            last_why = e.why
            out.append(f"   + {e.where}: {why}" + (f"\n       {e.text}" if e.text and i == 1 else ""))
        for e in c.contradict:
            out.append(f"   - {e.where}: {e.why}")
        fixes = c.fixes if i == 1 else c.fixes[:2]
        for f in fixes:
            out.append(f"   fix: {f.summary}")
        if i == 1:
            for n in c.not_helpful:
                out.append(f"   does not help: {n}")
            for n in c.notes:
                out.append(f"   note: {n}")
            out.append(f"   verify: {c.verify}")
    out.append("")
    out.append("The four questions:")
    out += [f"  {q}  {a}" for q, a in d.questions]
    if len(d.causes) > 1:
        out.append("To separate the top causes, collect:")
        out += [f"  - {c.cls}: {c.next_evidence}" for c in d.causes[:3]]
    out.append("")
    out.append("Read: " + "; ".join(d.read))
    if d.skipped:
        out.append("Skipped: " + "; ".join(d.skipped))
    return "\n".join(out)


def _md_cause(i: int, c: Cause) -> list[str]:
    lines = [f"### {i}. `{c.cls}` ({c.confidence:.0%})", "", c.explanation, ""]
    if c.from_prior:
        lines[2:2] = [f"_{PRIOR_ONLY[0].upper()}{PRIOR_ONLY[1:]}._", ""]
    if c.support:
        lines.append("Evidence for:")
        lines += [f"- `{e.where}` {e.why}" + (f": `{e.text[:160]}`" if e.text else "") for e in c.support]
    if c.contradict:
        lines.append("Evidence against:")
        lines += [f"- `{e.where}` {e.why}" for e in c.contradict]
    if c.fixes:
        lines.append("Fixes:")
        lines += [f"- {f.summary}" for f in c.fixes]
    if c.not_helpful:
        lines.append("Does not help:")
        lines += [f"- {n}" for n in c.not_helpful]
    if c.notes:
        lines.append("Notes:")
        lines += [f"- {n}" for n in c.notes]
    lines += [f"Verify: {c.verify}", ""]
    return lines


def render_markdown(d: Diagnosis) -> str:
    lines = [
        "## oomguard diagnose",
        "",
        f"**Phase:** {d.phase} ({d.phase_why})  ",
        f"**Setup:** {_setup_line(d)}",
        "",
    ]
    if d.incidents:
        lines += [f"**{len(d.incidents)} incidents**, each diagnosed on its own files:", ""]
        lines += [f"- {line.strip()}" for line in _incident_lines(d)] + [""]
    if d.memory:
        lines += (
            ["| where the memory went | amount (source) |", "|---|---|"]
            + [f"| {k} | {v} |" for k, v in d.memory]
            + [""]
        )
    for i, c in enumerate(d.causes, 1):
        lines += _md_cause(i, c)
    lines += ["**The four questions**", ""] + [f"- {q} {a}" for q, a in d.questions] + [""]
    if d.skipped:
        lines += (
            ["<details><summary>Skipped input</summary>", ""]
            + [f"- {s}" for s in d.skipped]
            + ["", "</details>"]
        )
    return "\n".join(lines)
