"""Diagnosis accuracy on the real OOM reports: evidence text in, root-cause class out.

Prints, per report, the expected class and the top three, then top-1 / top-3 accuracy and the confusion
pairs. Only the `evidence` field is given to the diagnosis (never the setting, notes or resolution).
Usage: python bench/diagnose_accuracy.py [path/to/oom_reports.jsonl]
"""

from __future__ import annotations

import io
import json
import sys
import time
from collections import Counter
from pathlib import Path

from oomguard.diagnose.diagnosis import diagnose
from oomguard.diagnose.evidence import Evidence
from oomguard.diagnose.read import read_one

DEFAULT = (
    Path(__file__).resolve().parents[1].parent / "shared" / "data" / "validation" / "oom_reports_dev.jsonl"
)


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else DEFAULT
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    top1 = top3 = crashes = 0
    confusion: Counter[tuple[str, str]] = Counter()
    started = time.perf_counter()
    print(f"{'report':<58} {'expected':<34} {'top 3 (confidence)'}")
    for row in rows:
        evidence = Evidence()
        try:
            read_one(row["id"], io.BytesIO(row["evidence"].encode()), evidence)
            result = diagnose(evidence)
            ranked = [(c.cls, c.confidence) for c in result.causes]
        except Exception as err:  # noqa: BLE001 - a crash is a result this bench reports
            crashes += 1
            ranked = [(f"CRASH {type(err).__name__}: {err}", 0.0)]
        want = row["root_cause_class"]
        names = [c for c, _ in ranked]
        hit1, hit3 = names[:1] == [want], want in names[:3]
        top1 += hit1
        top3 += hit3
        if not hit1:
            confusion[(want, names[0] if names else "-")] += 1
        mark = "ok " if hit1 else ("top3" if hit3 else "MISS")
        shown = ", ".join(f"{c} {p:.0%}" for c, p in ranked[:3])
        print(f"{mark:<4} {row['id'][:53]:<53} {want:<34} {shown}")
    n = len(rows)
    elapsed = time.perf_counter() - started
    print()
    print(
        f"reports {n}   top-1 {top1}/{n} = {top1 / n:.1%}   top-3 {top3}/{n} = {top3 / n:.1%}   crashes {crashes}"
        f"   ({elapsed * 1000 / max(n, 1):.1f} ms per report)"
    )
    if confusion:
        print("confusion (expected -> ranked first):")
        for (want, got), count in confusion.most_common():
            print(f"  {count} x {want} -> {got}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
