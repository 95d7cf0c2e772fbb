"""How good the learned prior is, alone and blended with the rules, on reports it never saw: cross-validation
on the tuning part of the corpus.

The same training as bench/train_prior.py (the model and its cross-validated temperature) runs on the 39
development reports plus four of five stratified folds of the tuning part, and the held-out fold is ranked
three ways: the rules alone, the prior alone (its classes by probability), and `diagnosis.rank`'s blend at
each weight of --w (at 0 the first cause is the rules' and the prior orders places 2..), without and with the
prior ordering the causes below the shipped threshold of the rules' confidence. Top-1 / top-3 over
all folds, and how often the first cause is right in each confidence band (for the prior alone, its
probability). The rules were tuned on these reports, so their numbers here are
optimistic and the weight is not chosen here: bench/blend_validate.py measures the blend on reports neither
has seen. The frozen split is never read. Needs scikit-learn (the `bench` extra).

Usage: python bench/prior_cv.py [--seeds 0,1] [--c 1,3] [--w 0,0.2,0.4]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from sklearn.model_selection import StratifiedKFold

sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_prior import DEV, PRIOR_FIRST_BELOW, TUNE, Row, load, train

from oomguard.diagnosis.diagnosis import rank
from oomguard.diagnosis.prior import Prior

FOLDS = 5
# Confidence bands of the first cause (bench/diagnose_accuracy.py's), lower bounds.
BANDS = (0.7, 0.5, 0.3, 0.0)

Ranked = list[tuple[str, float]]
Ranker = Callable[[Row, Prior], Ranked]


def rules_alone(row: Row, prior: Prior) -> Ranked:
    return list(rank(row.scores, row.conf, None, shown=row.shown)) if row.answered else []


def prior_alone(row: Row, prior: Prior) -> Ranked:
    return sorted(prior.shares(row.feats).items(), key=lambda kv: -kv[1]) if row.answered else []


def blend(weight: float, below: float = 0.0) -> Ranker:
    def ranked(row: Row, prior: Prior) -> Ranked:
        if not row.answered:
            return []
        return list(rank(row.scores, row.conf, prior.shares(row.feats), weight, below, row.shown))

    return ranked


def band(confidence: float) -> int:
    return next(i for i, low in enumerate(BANDS) if confidence >= low)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0", help="comma-separated fold seeds")
    parser.add_argument("--c", default="1", help="comma-separated inverse regularisation strengths")
    parser.add_argument("--w", default="0", help="comma-separated blend weights")
    args = parser.parse_args(argv)
    dev = [Row(r) for r in load(DEV)]
    tune = [Row(r) for r in load(TUNE)]
    rankers: dict[str, Ranker] = {"rules alone": rules_alone, "prior alone": prior_alone}
    rankers |= {f"blend w={w}": blend(float(w)) for w in args.w.split(",")}
    rankers |= {
        f"w={w} below {PRIOR_FIRST_BELOW:g}": blend(float(w), PRIOR_FIRST_BELOW) for w in args.w.split(",")
    }
    print(f"train: {len(dev)} dev + 4/5 of {len(tune)} tune; score the held-out fifth")
    print(f"{'':24} {'top-1':>6} {'top-3':>6}   first right / listed at >=70% 50-70% 30-50% <30%")
    for c in [float(x) for x in args.c.split(",")]:
        for seed in [int(x) for x in args.seeds.split(",")]:
            top1 = dict.fromkeys(rankers, 0)
            top3 = dict.fromkeys(rankers, 0)
            bands = {name: [[0, 0] for _ in BANDS] for name in rankers}
            folds = StratifiedKFold(FOLDS, shuffle=True, random_state=seed)
            for train_i, test_i in folds.split(tune, [r.want for r in tune]):
                prior = Prior.from_payload(train(dev, [tune[i] for i in train_i], c))
                for name, ranker in rankers.items():
                    for row in (tune[i] for i in test_i):
                        ranked = ranker(row, prior)
                        names = [c for c, _ in ranked]
                        top1[name] += names[:1] == [row.want]
                        top3[name] += row.want in names[:3]
                        if ranked:
                            counts = bands[name][band(ranked[0][1])]
                            counts[0] += names[0] == row.want
                            counts[1] += 1
            print(f"C={c} fold seed={seed}")
            for name in rankers:
                shown = "  ".join(f"{f'{k}/{n}':>7}" for k, n in bands[name])
                print(f"  {name:<22} {top1[name] / len(tune):6.1%} {top3[name] / len(tune):6.1%}   {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
