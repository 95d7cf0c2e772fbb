"""Train the prior `diagnose` uses to order its causes after the first (src/oomguard/diagnosis/prior.py) and
write its weights to src/oomguard/diagnosis/data/prior.json.

Trained on the 39 development reports (../shared/data/validation/oom_reports_dev.jsonl) and the tuning part of
the corpus (bench/data/oom_corpus/tune.jsonl); the frozen part is never read. A multinomial logistic
regression (scikit-learn, the `bench` extra) over the features of `prior.features`; features seen in fewer
than MIN_REPORTS training reports are dropped before fitting and the weights are rounded, so the file stays
small and the pure-Python scorer gives the model's own probabilities. The file records what it was trained on
(row count, classes, the SHA-256 of the dev and tune files) so a test catches a prior left stale by a corpus
change. bench/prior_cv.py cross-validates exactly this training.

Usage: python bench/train_prior.py [--c 0.3] [--out PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from sklearn.feature_extraction import DictVectorizer
from sklearn.linear_model import LogisticRegression

from oomguard.diagnosis.diagnosis import _confidences, failing_step
from oomguard.diagnosis.evidence import Evidence
from oomguard.diagnosis.prior import features
from oomguard.diagnosis.read import read_one
from oomguard.diagnosis.rules import CLASSES, score
from oomguard.diagnosis.setup import recover_setup

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT.parent / "shared" / "data" / "validation" / "oom_reports_dev.jsonl"
TUNE = ROOT / "bench" / "data" / "oom_corpus" / "tune.jsonl"
OUT = ROOT / "src" / "oomguard" / "diagnosis" / "data" / "prior.json"
# Inverse regularisation strength (bench/prior_cv.py --c compares others).
C = 0.3
# A feature must appear in this many training reports to get a weight.
MIN_REPORTS = 2
# Decimals kept per weight.
DECIMALS = 3


def corpus_hash(dev: Path = DEV, tune: Path = TUNE) -> str:
    """The SHA-256 of the training files (dev, then tune), as the shipped prior records it."""
    digest = hashlib.sha256()
    for path in (dev, tune):
        digest.update(path.read_bytes())
    return digest.hexdigest()


class Row:
    """One report as the rules and the prior see it."""

    def __init__(self, record: dict[str, object]) -> None:
        self.want = str(record["root_cause_class"])
        ev = Evidence()
        read_one(str(record["id"]), io.BytesIO(str(record["evidence"]).encode()), ev)
        self.answered = len(ev) > 0
        self.feats: list[str] = []
        self.scores = dict.fromkeys(CLASSES, 0.0)
        self.conf = dict.fromkeys(CLASSES, 0.0)
        if self.answered:
            setup = recover_setup(ev)
            tally, sit = score(ev, setup, failing_step(ev, setup))
            self.feats = features(ev, sit, setup)
            self.scores = {c: tally.score(c) for c in CLASSES}
            self.conf = _confidences(tally)


def load(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def fit(rows: list[Row], c: float = C) -> dict[str, Any]:
    """The prior's payload (classes in the taxonomy's order, intercepts, weights per feature) trained on the
    answered rows. A class with no training report gets a very low intercept and no weights."""
    train = [r for r in rows if r.answered]
    seen = Counter(f for r in train for f in set(r.feats))
    kept = {f for f, n in seen.items() if n >= MIN_REPORTS}
    vec = DictVectorizer()
    x = vec.fit_transform([{f: 1 for f in r.feats if f in kept} for r in train])
    model = LogisticRegression(C=c, max_iter=5000)
    model.fit(x, [r.want for r in train])
    fitted = [str(k) for k in model.classes_]
    index = {k: i for i, k in enumerate(fitted)}
    intercepts = [
        round(float(model.intercept_[index[k]]), DECIMALS) if k in index else -30.0 for k in CLASSES
    ]
    weights: dict[str, list[float]] = {}
    for j, name in enumerate(vec.get_feature_names_out()):
        ws = [round(float(model.coef_[index[k], j]), DECIMALS) if k in index else 0.0 for k in CLASSES]
        if any(ws):
            weights[str(name)] = ws
    meta = {
        "rows": len(train),
        "c": c,
        "min_reports": MIN_REPORTS,
        "features": len(weights),
    }
    return {"classes": list(CLASSES), "intercepts": intercepts, "weights": weights, "meta": meta}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--c", type=float, default=C, help="inverse regularisation strength")
    parser.add_argument("--out", type=Path, default=OUT, help="where to write the prior")
    args = parser.parse_args(argv)
    dev, tune = load(DEV), load(TUNE)
    payload = fit([Row(r) for r in dev + tune], args.c)
    payload["meta"].update(
        {"dev_reports": len(dev), "tune_reports": len(tune), "corpus_sha256": corpus_hash()}
    )
    args.out.write_text(json.dumps(payload, separators=(",", ":"), sort_keys=False) + "\n")
    meta = payload["meta"]
    print(
        f"trained on {meta['rows']} answered reports of {len(dev)} dev + {len(tune)} tune; "
        f"{meta['features']} features; wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KiB)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
