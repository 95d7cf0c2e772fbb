"""Train the prior `diagnose` blends with its rules (src/oomguard/diagnosis/prior.py) and write its weights to
src/oomguard/diagnosis/data/prior.json.

Trained on the 39 development reports (../shared/data/validation/oom_reports_dev.jsonl) and the tuning part of
the corpus (bench/data/oom_corpus/tune.jsonl); the frozen part is never read. A multinomial logistic
regression (scikit-learn, the `bench` extra) over the features of `prior.features`, each entering with
`prior.value` (words at a lower value than typed facts); features seen in fewer than MIN_REPORTS training
reports are dropped before fitting and the weights are rounded, so the file stays small and the pure-Python
scorer gives the model's own probabilities. The temperature of its probabilities is fitted by 5-fold
cross-validation on the tuning part (the held-out folds' log-loss; dev stays in every training set). The blend
weight `diagnosis.rank` uses is BLEND_WEIGHT, chosen on reports neither the rules nor the prior have seen
(bench/blend_validate.py). The file records what it was trained on (row count, classes, the SHA-256 of the dev
and tune files) so a test catches a prior left stale by a corpus change. bench/prior_cv.py cross-validates
exactly this training.

Usage: python bench/train_prior.py [--c 1] [--out PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from sklearn.feature_extraction import DictVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold
from threadpoolctl import threadpool_limits

from oomguard.diagnosis.diagnosis import CONFIDENCE_FLOOR, _confidences, failing_step
from oomguard.diagnosis.evidence import Evidence
from oomguard.diagnosis.prior import Prior, features, value
from oomguard.diagnosis.read import read_one
from oomguard.diagnosis.rules import CLASSES, score
from oomguard.diagnosis.setup import recover_setup

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT.parent / "shared" / "data" / "validation" / "oom_reports_dev.jsonl"
TUNE = ROOT / "bench" / "data" / "oom_corpus" / "tune.jsonl"
OUT = ROOT / "src" / "oomguard" / "diagnosis" / "data" / "prior.json"
# Inverse regularisation strength (bench/prior_cv.py --c compares others: with words at prior.WORD_VALUE,
# 1 and 3 score alike, 0.3 two points lower).
C = 1.0
# A feature must appear in this many training reports to get a weight.
MIN_REPORTS = 2
# Decimals kept per weight.
DECIMALS = 3
# The prior's weight against the rules' confidence in `diagnosis.rank` (0: the first cause is the rules').
BLEND_WEIGHT = 0.1
# Below this confidence of the rules' first cause the prior orders the causes (`diagnosis.rank`); chosen on
# reports neither had seen (bench/blend_validate.py --below).
PRIOR_FIRST_BELOW = 0.3
# Folds of the cross-validation that fits the temperature, and the temperatures tried (log-spaced, 0.25-4).
FOLDS = 5
TEMPERATURES = tuple(round(2 ** (k / 8), 3) for k in range(-16, 17))


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
        self.shown = dict.fromkeys(CLASSES, 0.0)
        if self.answered:
            setup = recover_setup(ev)
            tally, sit = score(ev, setup, failing_step(ev, setup))
            self.feats = features(ev, sit, setup)
            self.scores = {c: tally.score(c) for c in CLASSES}
            self.conf = _confidences(tally)
            self.shown = _confidences(tally, CONFIDENCE_FLOOR)


def load(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def design(feats: list[str], kept: set[str] | None = None) -> dict[str, float]:
    """One report's row of the design matrix: each kept feature at its value (`prior.value`)."""
    return {f: value(f) for f in feats if kept is None or f in kept}


def model(rows: list[Row], c: float = C) -> tuple[DictVectorizer, LogisticRegression]:
    """The fitted vectorizer and model on the answered rows (features seen in MIN_REPORTS of them)."""
    train = [r for r in rows if r.answered]
    seen = Counter(f for r in train for f in set(r.feats))
    kept = {f for f, n in seen.items() if n >= MIN_REPORTS}
    vec = DictVectorizer()
    x = vec.fit_transform([design(r.feats, kept) for r in train])
    fitted = LogisticRegression(C=c, max_iter=5000)
    with threadpool_limits(1):  # a 534 x 1,300 problem: threads only add their start-up cost
        fitted.fit(x, [r.want for r in train])
    return vec, fitted


def payload_of(vec: DictVectorizer, fitted: LogisticRegression) -> dict[str, Any]:
    """The model as the prior's payload: classes in the taxonomy's order, intercepts, the weights per feature
    rounded to DECIMALS, temperature 1 and BLEND_WEIGHT. A class with no training report gets a very low
    intercept and no weights."""
    index = {str(k): i for i, k in enumerate(fitted.classes_)}
    intercepts = [
        round(float(fitted.intercept_[index[k]]), DECIMALS) if k in index else -30.0 for k in CLASSES
    ]
    weights: dict[str, list[float]] = {}
    for j, name in enumerate(vec.get_feature_names_out()):
        ws = [round(float(fitted.coef_[index[k], j]), DECIMALS) if k in index else 0.0 for k in CLASSES]
        if any(ws):
            weights[str(name)] = ws
    return {
        "classes": list(CLASSES),
        "intercepts": intercepts,
        "weights": weights,
        "temperature": 1.0,
        "blend_weight": BLEND_WEIGHT,
        "prior_first_below": PRIOR_FIRST_BELOW,
        "meta": {"c": float(fitted.C), "min_reports": MIN_REPORTS, "features": len(weights)},
    }


def fit(rows: list[Row], c: float = C) -> dict[str, Any]:
    """The prior's payload trained on the answered rows (temperature 1)."""
    payload = payload_of(*model(rows, c))
    payload["meta"]["rows"] = sum(r.answered for r in rows)
    return payload


def fit_temperature(dev: list[Row], tune: list[Row], c: float = C, seed: int = 0) -> float:
    """The temperature that minimises the log-loss of the prior's probabilities on held-out reports: each of
    FOLDS stratified folds of `tune` scored by a prior trained on `dev` and the other folds."""
    held: list[tuple[list[float], int]] = []
    folds = StratifiedKFold(FOLDS, shuffle=True, random_state=seed)
    for train_i, test_i in folds.split(tune, [r.want for r in tune]):
        prior = Prior.from_payload(fit(dev + [tune[i] for i in train_i], c))
        for i in test_i:
            if tune[i].answered:
                held.append((prior.logits(tune[i].feats), CLASSES.index(tune[i].want)))

    def log_loss(t: float) -> float:
        total = 0.0
        for logits, want in held:
            top = max(logits)
            norm = sum(math.exp((x - top) / t) for x in logits)
            total += math.log(norm) - (logits[want] - top) / t
        return total / max(len(held), 1)

    return min(TEMPERATURES, key=log_loss)


def train(dev: list[Row], tune: list[Row], c: float = C) -> dict[str, Any]:
    """The shipped training: the model on dev + tune, its temperature by cross-validation on tune."""
    payload = fit(dev + tune, c)
    payload["temperature"] = fit_temperature(dev, tune, c)
    return payload


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--c", type=float, default=C, help="inverse regularisation strength")
    parser.add_argument("--out", type=Path, default=OUT, help="where to write the prior")
    args = parser.parse_args(argv)
    dev, tune = load(DEV), load(TUNE)
    payload = train([Row(r) for r in dev], [Row(r) for r in tune], args.c)
    payload["meta"].update(
        {"dev_reports": len(dev), "tune_reports": len(tune), "corpus_sha256": corpus_hash()}
    )
    args.out.write_text(json.dumps(payload, separators=(",", ":"), sort_keys=False) + "\n")
    meta = payload["meta"]
    print(
        f"trained on {meta['rows']} answered reports of {len(dev)} dev + {len(tune)} tune; "
        f"{meta['features']} features; temperature {payload['temperature']}; blend weight "
        f"{payload['blend_weight']}; wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KiB)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
