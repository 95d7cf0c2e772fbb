"""How much the evidence itself decides: a blind second reader's labels against the thread's, beside
`diagnose` on the same reports.

The corpus labels come from each thread's resolution (maintainer, merged fix, the fix that worked). A second
reader (an AI assistant briefed as a serving engineer) labelled samples of the corpus from the `evidence`
field alone: no thread, notes, resolution or oomguard output. For each report it named a first and a second
cause, how certain it was and the kind of cue that decided it (bench/data/oom_corpus/second_reader.tsv).
Where that reader is right, the evidence carries the answer and a diagnoser could find it; where it is not,
the report is ambiguous on its face. Printed per labelled sample: the reader's top-1 / top-2 and `diagnose`'s
top-1 / top-3 on the same reports (diagnose as the code now stands), per certainty and per cue, and how often
diagnose misses what the reader got. Frozen rows enter aggregates only: no per-report line is printed.

Usage: python bench/second_reader.py
"""

from __future__ import annotations

import csv
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from diagnose_accuracy import run_one

CORPUS = Path(__file__).resolve().parent / "data" / "oom_corpus"
LABELS = CORPUS / "second_reader.tsv"
FIELDS = ("id", "sample", "first", "second", "certainty", "cue", "decisive")


@dataclass(frozen=True)
class Reading:
    """One report as the second reader labelled it, with the thread's label and what diagnose ranked."""

    sample: str
    want: str
    first: str
    second: str
    certainty: str
    cue: str
    tool: tuple[str, ...]

    @property
    def reader_top1(self) -> bool:
        return self.first == self.want

    @property
    def reader_top2(self) -> bool:
        return self.want in (self.first, self.second)

    @property
    def tool_top1(self) -> bool:
        return self.tool[:1] == (self.want,)

    @property
    def tool_top3(self) -> bool:
        return self.want in self.tool[:3]


def corpus_rows() -> dict[str, dict[str, object]]:
    rows: dict[str, dict[str, object]] = {}
    for path in sorted(CORPUS.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                rows[str(row["id"])] = row
    return rows


def readings() -> list[Reading]:
    rows = corpus_rows()
    out: list[Reading] = []
    with LABELS.open(newline="") as f:
        for rec in csv.DictReader(f, fieldnames=FIELDS, delimiter="\t"):
            if rec["id"].startswith("#") or rec["id"] == "id":
                continue
            row = rows[rec["id"]]
            tool = tuple(run_one(row).names)
            out.append(
                Reading(
                    rec["sample"],
                    str(row["root_cause_class"]),
                    rec["first"],
                    rec["second"],
                    rec["certainty"],
                    rec["cue"],
                    tool,
                )
            )
    return out


def line(label: str, group: list[Reading]) -> str:
    n = len(group)

    def share(k: int) -> str:
        return f"{k:>3}/{n:<3} {k / n:6.1%}"

    reader = (
        f"top-1 {share(sum(r.reader_top1 for r in group))}  top-2 {share(sum(r.reader_top2 for r in group))}"
    )
    tool = f"top-1 {share(sum(r.tool_top1 for r in group))}  top-3 {share(sum(r.tool_top3 for r in group))}"
    return f"  {label:<28} reader {reader} | diagnose {tool}"


def main() -> int:
    by_sample: dict[str, list[Reading]] = defaultdict(list)
    by_round: dict[str, list[Reading]] = defaultdict(list)
    for r in readings():
        by_sample[r.sample].append(r)
        round_number = re.match(r"round (\d+) ", r.sample)
        if round_number:
            by_round[round_number[1]].append(r)
    for number, group in by_round.items():
        by_sample[f"round {number}, all ({len(group)}, unseen)"] = group
    for sample, group in by_sample.items():
        print(f"\n=== {sample}: {len(group)} reports ===")
        print(line("all", group))
        for key, title in ((lambda r: r.certainty, "certainty"), (lambda r: r.cue, "cue")):
            parts: dict[str, list[Reading]] = defaultdict(list)
            for r in group:
                parts[key(r)].append(r)
            for name in sorted(parts, key=lambda k: -len(parts[k])):
                print(line(f"{title} {name}", parts[name]))
        missed = [r for r in group if r.reader_top1 and not r.tool_top1]
        print(
            f"  reader right first, diagnose not: {len(missed)}; both wrong: "
            f"{sum(not r.reader_top1 and not r.tool_top1 for r in group)}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
