"""Diagnosis accuracy on real OOM reports: evidence text in, root-cause class out.

Splits, each printed on its own:
- dev: the 39 development reports (../shared/data/validation/oom_reports_dev.jsonl), the rules were built on
them;
- tune: the tuning part of the harvested corpus (bench/data/oom_corpus/tune.jsonl);
- frozen: the held-out 30% of that corpus (bench/data/oom_corpus/frozen.jsonl), never tuned on.
For each: top-1 / top-3, the answer rate (overall and on machine evidence), top-1 per confidence band, per
class, the confusion list, and a keyword-grep baseline (bench/grep_baseline.py) on the same reports.
Only the `evidence` field is given to the diagnosis (never the setting, notes or resolution). Per-report lines
are printed for dev and tune only (`--cases` prints them for every split asked for).

Usage: python bench/diagnose_accuracy.py [--split dev,tune,frozen] [--cases] [FILE.jsonl ...]
(files given explicitly are scored as one extra split named after the file)
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from grep_baseline import rank as grep_rank

from oomguard.diagnosis.diagnosis import diagnose
from oomguard.diagnosis.evidence import Evidence
from oomguard.diagnosis.read import read_one, require_evidence
from oomguard.errors import InputFormatError

ROOT = Path(__file__).resolve().parents[1]
SPLITS = {
    "dev": ROOT.parent / "shared" / "data" / "validation" / "oom_reports_dev.jsonl",
    "tune": ROOT / "bench" / "data" / "oom_corpus" / "tune.jsonl",
    "frozen": ROOT / "bench" / "data" / "oom_corpus" / "frozen.jsonl",
}
# Splits whose per-report lines are printed by default (frozen's are not read while tuning).
SHOWN = ("dev", "tune")
# Splits the shipped prior (bench/train_prior.py) was trained on: its places 2+ are train = test there, so
# their top-3 is optimistic; the honest number for the tuning part is bench/prior_cv.py's cross-validation.
PRIOR_TRAINED_ON = ("dev", "tune")
# Confidence bands of the top cause: (lower bound, label).
BANDS = ((0.7, ">=70%"), (0.5, "50-70%"), (0.3, "30-50%"), (0.0, "<30%"))
# Machine evidence: what a tool printed (log prefixes, tracebacks, allocator text, sizes, tables, kill texts),
# as opposed to a reporter's sentences only. Independent of the diagnoser's parsers on purpose.
MACHINE = re.compile(
    r"Traceback|File \"|Error\b|ERROR|INFO|WARNING|\b\d+(\.\d+)?\s?[MG]i?B\b|Killed|OOMKilled|exit code|"
    r"\|\s+\d|Tried to allocate|out of memory|^\s*\[|\bpid=\d+",
    re.MULTILINE,
)


@dataclass
class Outcome:
    id: str
    want: str
    ranked: list[tuple[str, float]]
    answered: bool
    machine: bool
    grep: list[str]
    crashed: str = ""

    @property
    def names(self) -> list[str]:
        return [c for c, _ in self.ranked]


def run_one(row: dict[str, object]) -> Outcome:
    text = str(row["evidence"])
    want = str(row["root_cause_class"])
    machine = bool(MACHINE.search(text))
    evidence = Evidence()
    answered, crashed = True, ""
    ranked: list[tuple[str, float]] = []
    try:
        read_one(str(row["id"]), io.BytesIO(text.encode()), evidence)
        require_evidence(evidence)
        ranked = [(c.cls, c.confidence) for c in diagnose(evidence).causes]
    except InputFormatError:
        answered = False
    except Exception as err:  # noqa: BLE001 - a crash is a result this bench reports
        crashed = f"{type(err).__name__}: {err}"
        answered = False
    return Outcome(str(row["id"]), want, ranked, answered, machine, grep_rank(text), crashed)


# Which harvest round a corpus row came from (bench/data/oom_corpus/README.md): a round's frozen rows were
# unseen by every rule change made before it landed, so its score is reported on its own too.
ROUND_OF_HARVESTER = {
    "corpus-vllm": 1,
    "corpus-other": 1,
    "harvest-vllm": 2,
    "harvest-other": 2,
    "harvest3-vllm": 3,
    "harvest3-other": 3,
    "harvest3-sglang": 3,
    "harvest4-v0": 4,
    "harvest4-v1": 4,
    "harvest4-wrap": 4,
    "harvest4-more": 4,
    "harvest5-vllm": 5,
    "harvest5-other": 5,
    "harvest6-core": 6,
    "harvest6-rl": 6,
    "harvest7-vllm": 7,
    "harvest7-engines": 7,
    "harvest7-platforms": 7,
    "harvest8-vllm": 8,
    "harvest8-engines": 8,
    "harvest8-wrappers": 8,
    "harvest9-langs": 9,
    "harvest9-hw": 9,
    "harvest9-features": 9,
}


def pct(k: int, n: int) -> str:
    return f"{k}/{n} = {k / n:.1%}" if n else "0/0"


def report(name: str, rows: list[dict[str, object]], cases: bool) -> None:
    started = time.perf_counter()
    outcomes = [run_one(r) for r in rows]
    rounds = [ROUND_OF_HARVESTER.get(str(r.get("harvester")), 0) for r in rows]
    elapsed = time.perf_counter() - started
    n = len(outcomes)
    trained = "   (prior trained on this split: top-3 is train = test; see bench/prior_cv.py)"
    print(f"\n=== {name}: {n} reports ===" + (trained if name in PRIOR_TRAINED_ON else ""))
    if cases:
        print(f"{'':4} {'report':<53} {'expected':<34} {'top 3 (confidence)'}")
        for o in outcomes:
            hit1, hit3 = o.names[:1] == [o.want], o.want in o.names[:3]
            mark = "ok " if hit1 else ("top3" if hit3 else ("MISS" if o.answered else "NONE"))
            shown = o.crashed or ", ".join(f"{c} {p:.0%}" for c, p in o.ranked[:3]) or "(no answer)"
            print(f"{mark:<4} {o.id[:53]:<53} {o.want:<34} {shown}")
    top1 = sum(o.names[:1] == [o.want] for o in outcomes)
    top3 = sum(o.want in o.names[:3] for o in outcomes)
    g1 = sum(o.grep[:1] == [o.want] for o in outcomes)
    g3 = sum(o.want in o.grep[:3] for o in outcomes)
    machine = [o for o in outcomes if o.machine]
    crashes = sum(bool(o.crashed) for o in outcomes)
    print(f"diagnose  top-1 {pct(top1, n)}   top-3 {pct(top3, n)}   crashes {crashes}")
    print(f"grep      top-1 {pct(g1, n)}   top-3 {pct(g3, n)}")
    if any(rounds):
        parts = []
        for number in sorted(set(rounds) - {0}):
            of = [o for o, r in zip(outcomes, rounds, strict=True) if r == number]
            hits = sum(o.names[:1] == [o.want] for o in of)
            hits3 = sum(o.want in o.names[:3] for o in of)
            parts.append(f"round {number} {pct(hits, len(of))} / {hits3 / len(of):.1%}")
        print("by harvest round (top-1 / top-3): " + "; ".join(parts))
    print(
        f"answer rate {pct(sum(o.answered for o in outcomes), n)}; on machine evidence "
        f"{pct(sum(o.answered for o in machine), len(machine))}"
        f"   ({elapsed * 1000 / max(n, 1):.1f} ms per report)"
    )
    print("top-1 per confidence band of the first cause:")
    for i, (low, label) in enumerate(BANDS):
        high = BANDS[i - 1][0] if i else 1.01
        band = [o for o in outcomes if o.ranked and low <= o.ranked[0][1] < high]
        print(f"  {label:>7}: {pct(sum(o.names[0] == o.want for o in band), len(band))}")
    print("per class (top-1, top-3 / reports):")
    for cls in sorted({o.want for o in outcomes}):
        of = [o for o in outcomes if o.want == cls]
        print(
            f"  {cls:<34} {sum(o.names[:1] == [cls] for o in of):>3} {sum(cls in o.names[:3] for o in of):>3}"
            f" / {len(of)}"
        )
    confusion = Counter(
        (o.want, o.names[0] if o.names else "(no answer)") for o in outcomes if o.names[:1] != [o.want]
    )
    if confusion:
        print("confusion (expected -> ranked first):")
        for (want, got), count in confusion.most_common():
            print(f"  {count} x {want} -> {got}")


def load(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="extra JSONL files to score")
    parser.add_argument("--split", default="dev,tune,frozen", help="comma-separated: dev, tune, frozen")
    parser.add_argument("--cases", action="store_true", help="per-report lines for every split")
    args = parser.parse_args(argv)
    wanted = [s for s in args.split.split(",") if s] if not args.files else []
    for name in wanted:
        if name not in SPLITS:
            parser.error(f"unknown split {name!r} (dev, tune, frozen)")
        path = SPLITS[name]
        if not path.exists():
            print(f"\n=== {name}: {path} not found ===")
            continue
        report(name, load(path), args.cases or name in SHOWN)
    for path in args.files:
        report(path.name, load(path), True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
