"""Does a learned prior over the cause classes help `diagnose`? Measured by cross-validation, not shipped.

The prior: a multinomial logistic regression (scikit-learn) over the words of the evidence's fact lines
(lower case, log prefixes dropped, paths reduced to their last part, numbers and hex masked) and the typed
facts the readers extract (signals, phase, frame categories, allocator quantities in bands, startup
quantities, flags set, engine). Combined with the rules: the rules' confidences keep their share and the
share they leave to "none of these" (CONFIDENCE_FLOOR) is spread over the classes by the prior, so it
decides only where the rules are weak.

Cross-validation over the corpus's tuning part: 5 stratified folds (seed 0); each fold's prior is trained on
the 39 development reports plus the other four folds and scored on the held-out fold, rules alone against
rules + prior. The frozen split is never read here. Needs `pip install scikit-learn`.

Usage: python bench/prior_cv.py [--seeds 0,1] [--c 0.3,1]
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
from pathlib import Path

from sklearn.feature_extraction import DictVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold

from oomguard.diagnose.diagnosis import _confidences, failing_step
from oomguard.diagnose.evidence import (
    Evidence,
    Flags,
    Frame,
    GpuProcess,
    HostMemory,
    LoadSample,
    OomMessage,
    ScheduledStep,
    Signal,
    Snapshot,
    StartupNumber,
    Version,
)
from oomguard.diagnose.read import read_one
from oomguard.diagnose.rules import CLASSES, Situation, frame_category, outside_pytorch, score
from oomguard.diagnose.setup import EngineSetup, recover_setup
from oomguard.units import GiB as GIB

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT.parent / "shared" / "data" / "validation" / "oom_reports_dev.jsonl"
TUNE = ROOT / "bench" / "data" / "oom_corpus" / "tune.jsonl"
FOLDS = 5
# The rules' first cause below this confidence: where the prior is meant to help.
WEAK = 0.3

# Words kept per fact line (a pasted 400-character line holds ~60).
MAX_WORDS_PER_LINE = 80

# Log prefixes: timestamps, levels, `[file.py:123]`, process tags; none says anything about the cause.
_PREFIX = re.compile(
    r"^\s*(?:\(\w+(?:_\w+)*\s+pid=\d+(?:,\s*ip=[\d.]+)?\)\s*)?"
    r"(?:\[?\d{4}-\d\d-\d\d[T ][\d:.,]+Z?\]?\s*|\[?\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\]?\s*)?"
)
_HEX = re.compile(r"\b0x[0-9a-f]+\b|\b[0-9a-f]{12,}\b")
_PATH = re.compile(r"(?:[\w.-]*/)+([\w.-]+)")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_WORD = re.compile(r"[a-z][a-z0-9_]+")


def words(line: str) -> list[str]:
    """A fact's line as the prior reads it: lower case, no log prefix, paths reduced to their last part,
    hex and numbers masked out (they name the reporter's setup, not the mechanism)."""
    text = _PREFIX.sub("", line.lower())
    text = _HEX.sub(" ", text)
    text = _PATH.sub(r" \1 ", text)
    text = _NUMBER.sub(" ", text)
    return _WORD.findall(text)[:MAX_WORDS_PER_LINE]


def _band(value: float, edges: tuple[float, ...]) -> int:
    """The index of the first edge above value (len(edges) when none)."""
    for i, edge in enumerate(edges):
        if value < edge:
            return i
    return len(edges)


def _oom_features(o: OomMessage) -> list[str]:
    out = [f"oom:{o.flavor}"]
    if o.requested is not None:
        out.append(f"oom:request-gib-band={_band(o.requested / GIB, (0.05, 0.5, 2, 8, 32))}")
        if o.total and o.requested > o.total:
            out.append("oom:request>total")
        if o.free is not None and o.total:
            out.append(f"oom:free-share-band={_band(o.free / o.total, (0.01, 0.05, 0.2))}")
        if o.reserved_unallocated is not None:
            out.append(
                "oom:unallocated/request-band="
                + str(_band(o.reserved_unallocated / max(o.requested, 1), (0.1, 1)))
            )
    outside = outside_pytorch(o)
    if outside is not None and o.total:
        out.append(f"oom:outside-share-band={_band(outside / o.total, (0.05, 0.15, 0.5))}")
    if o.processes:
        out.append(f"oom:processes={min(len(o.processes), 3)}")
    if o.private_pools:
        out.append("oom:private-pools")
    if o.process_tag:
        out.append("oom:tagged")
    return out


def features(ev: Evidence, sit: Situation, setup: EngineSetup) -> list[str]:
    """The features of one diagnosis: words of the facts' lines (each once) and typed facts."""
    found: set[str] = set()
    seen_lines: set[str] = set()
    for fact in ev:
        if fact.text not in seen_lines:
            seen_lines.add(fact.text)
            found.update(f"w:{w}" for w in words(fact.text))
        found.add(f"fact:{type(fact).__name__}")
        if isinstance(fact, Signal):
            found.add(f"signal:{fact.name}")
        elif isinstance(fact, OomMessage):
            found.update(_oom_features(fact))
        elif isinstance(fact, Frame):
            category = frame_category(fact)
            if category:
                found.add(f"frame:{category}")
        elif isinstance(fact, StartupNumber):
            found.add(f"startup:{fact.quantity}")
        elif isinstance(fact, HostMemory):
            found.add(f"host:{fact.quantity}")
        elif isinstance(fact, Flags):
            found.update(f"flag:{key}" for key, _ in fact.flags)
        elif isinstance(fact, Version):
            found.add(f"version:{fact.engine}")
    crash = sit.kv_at_crash
    if crash is not None and crash.kv_usage is not None:
        found.add(f"kv-at-crash-band={_band(crash.kv_usage, (0.6, 0.9))}")
    for kind in (LoadSample, ScheduledStep, GpuProcess, Snapshot):
        if ev.count(kind):
            found.add(f"has:{kind.__name__}")
    found.add(f"phase:{sit.phase}")
    found.add(f"engine:{setup.engine}")
    found.add(f"gpu-failure:{sit.gpu_failure}")
    return sorted(found)


class Row:
    def __init__(self, record: dict[str, object]) -> None:
        self.want = str(record["root_cause_class"])
        ev = Evidence()
        read_one(str(record["id"]), io.BytesIO(str(record["evidence"]).encode()), ev)
        self.answered = len(ev) > 0
        self.feats: dict[str, int] = {}
        self.scores = dict.fromkeys(CLASSES, 0.0)
        self.conf = dict.fromkeys(CLASSES, 0.0)
        if self.answered:
            setup = recover_setup(ev)
            tally, sit = score(ev, setup, failing_step(ev, setup))
            self.feats = dict.fromkeys(features(ev, sit, setup), 1)
            self.scores = {c: tally.score(c) for c in CLASSES}
            self.conf = _confidences(tally)

    def ranked(self, prior: dict[str, float] | None) -> list[str]:
        if not self.answered:
            return []
        if prior is None:
            # as diagnose lists them: the first, then only causes with some weight
            ranked = sorted(CLASSES, key=lambda c: (-self.scores[c], CLASSES.index(c)))
            return ranked[:1] + [c for c in ranked[1:] if self.scores[c] > 0]
        left = max(0.0, 1.0 - sum(self.conf.values()))
        mixed = {c: self.conf[c] + left * prior.get(c, 0.0) for c in CLASSES}
        return sorted(CLASSES, key=lambda c: (-mixed[c], CLASSES.index(c)))


def hits(rows: list[Row], ranks: list[list[str]], k: int) -> int:
    return sum(r.want in rk[:k] for r, rk in zip(rows, ranks, strict=True))


def load(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0", help="comma-separated fold seeds")
    parser.add_argument("--c", default="0.3", help="comma-separated inverse regularisation strengths")
    args = parser.parse_args(argv)
    dev = [Row(r) for r in load(DEV)]
    tune = [Row(r) for r in load(TUNE)]
    print(f"train: {len(dev)} dev + 4/5 of {len(tune)} tune; score the held-out fifth")
    for c in [float(x) for x in args.c.split(",")]:
        for seed in [int(x) for x in args.seeds.split(",")]:
            folds = StratifiedKFold(FOLDS, shuffle=True, random_state=seed)
            totals = [0, 0, 0, 0, 0, 0, 0, 0, 0]
            print(f"\nC={c} seed={seed}   rules alone top-1/top-3   rules+prior top-1/top-3   (weak rows)")
            for n, (train_i, test_i) in enumerate(folds.split(tune, [r.want for r in tune]), 1):
                train = dev + [tune[i] for i in train_i]
                test = [tune[i] for i in test_i]
                vec = DictVectorizer()
                model = LogisticRegression(C=c, max_iter=3000)
                model.fit(vec.fit_transform([r.feats for r in train]), [r.want for r in train])
                probs = model.predict_proba(vec.transform([r.feats for r in test]))
                priors = [dict(zip(model.classes_, p, strict=True)) for p in probs]
                alone = [r.ranked(None) for r in test]
                both = [r.ranked(p) for r, p in zip(test, priors, strict=True)]
                weak = [i for i, r in enumerate(test) if max(r.conf.values()) < WEAK]
                wr = [test[i] for i in weak]
                row = [
                    len(test),
                    hits(test, alone, 1),
                    hits(test, alone, 3),
                    hits(test, both, 1),
                    hits(test, both, 3),
                    len(weak),
                    hits(wr, [alone[i] for i in weak], 1),
                    hits(wr, [both[i] for i in weak], 1),
                    hits(wr, [both[i] for i in weak], 3),
                ]
                totals = [a + b for a, b in zip(totals, row, strict=True)]
                print(fold_line(f"fold {n}", row))
            print(fold_line("all", totals))
    return 0


def fold_line(name: str, r: list[int]) -> str:
    n, weak = r[0], r[5]
    return (
        f"  {name:<7} n={n:<4} rules {r[1] / n:6.1%} {r[2] / n:6.1%}   +prior {r[3] / n:6.1%} {r[4] / n:6.1%}"
        f"   (weak {weak}: top-1 {r[6]}/{weak} -> {r[7]}/{weak}, top-3 with prior {r[8]}/{weak})"
    )


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
