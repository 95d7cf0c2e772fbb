"""`oomguard diagnose [--json|--markdown] EVIDENCE...`: files, directories, archives, '-' for stdin."""

from __future__ import annotations

import argparse
import sys

from oomguard.diagnosis.diagnosis import diagnose
from oomguard.diagnosis.read import Reading, read_evidence, require_evidence
from oomguard.diagnosis.render import render_json, render_markdown, render_text
from oomguard.diagnosis.setup import supplied_facts
from oomguard.errors import InputFormatError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputFormatError(message)


def main(argv: list[str]) -> int:
    parser = _Parser(
        prog="oomguard diagnose",
        description="Root cause and fix of a vLLM/SGLang OOM from its "
        "evidence: logs, tracebacks, nvidia-smi, dmesg, kubectl, cgroup files, free, /metrics scrapes, "
        "torch memory snapshots; files, directories, tar/zip archives or '-' for stdin.",
    )
    parser.add_argument("evidence", nargs="+", help="files, directories, archives, or - for stdin")
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument(
        "--json", action="store_true", help="one JSON object (causes ordered by likelihood, setup)"
    )
    fmt.add_argument("--markdown", action="store_true", help="Markdown to paste into an issue")
    parser.add_argument(
        "--command",
        help='the server command when the evidence lacks it (e.g. "vllm serve MODEL -tp 2"): fixes are '
        "re-planned",
    )
    parser.add_argument("--gpu", help="the GPU when the evidence does not name it (e.g. H100, A100-80GB)")
    parser.add_argument("--vllm-version", help="the vLLM version when the evidence does not show it")
    parser.add_argument(
        "--every-line",
        action="store_true",
        help="hand every line of large logs to every parser (slow: the reference the fast reader equals)",
    )
    args = parser.parse_args(argv)
    supplied = supplied_facts(args.command, args.gpu, args.vllm_version)
    evidence = read_evidence(
        args.evidence,
        stdin=sys.stdin.buffer if "-" in args.evidence else None,
        how=Reading.EVERY_LINE if args.every_line else Reading.AUTO,
    )
    require_evidence(evidence)
    evidence.extend(supplied)
    result = diagnose(evidence)
    text = (
        render_json(result)
        if args.json
        else render_markdown(result)
        if args.markdown
        else render_text(result)
    )
    sys.stdout.write(text + "\n")
    return 0
