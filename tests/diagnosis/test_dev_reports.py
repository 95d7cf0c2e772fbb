"""The real OOM reports: no crash on any, and the accuracy floor the issue sets (measured in full by
bench/diagnose_accuracy.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from oomguard.diagnosis.diagnosis import diagnose
from oomguard.diagnosis.evidence import Evidence
from oomguard.diagnosis.read import read_one


def test_dev_reports_top1_85_and_top3_95_percent(shared_data: Path):
    rows = [
        json.loads(line)
        for line in (shared_data / "validation" / "oom_reports_dev.jsonl").read_text().splitlines()
    ]
    top1 = top3 = 0
    for row in rows:
        evidence = Evidence()
        read_one(row["id"], io.BytesIO(row["evidence"].encode()), evidence)
        ranked = [c.cls for c in diagnose(evidence).causes]
        top1 += ranked[0] == row["root_cause_class"]
        top3 += row["root_cause_class"] in ranked[:3]
    assert top1 / len(rows) >= 0.85
    assert top3 / len(rows) >= 0.95
