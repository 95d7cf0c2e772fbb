"""How much the learned prior adds to `diagnose`, measured by cross-validation on reports it never saw.

`diagnose` keeps the rules' first cause and orders places 2.. by the rules' confidence plus the prior's share
of what the rules leave to "none of these" (`diagnosis.rank`; the prior: `oomguard/diagnosis/prior.py`,
trained by bench/train_prior.py). Here the same training runs on the 39 development reports plus four of five
stratified folds of the corpus's tuning part, and the held-out fold is ranked with and without that prior:
rules alone against rules + prior at places 2+, top-1 and top-3, per fold and over all folds. Top-1 is the
same by construction. The frozen split is never read here. Needs scikit-learn (the `bench` extra).

Usage: python bench/prior_cv.py [--seeds 0,1] [--c 0.3,1]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sklearn.model_selection import StratifiedKFold

sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_prior import DEV, TUNE, Row, fit, load

from oomguard.diagnosis.diagnosis import rank
from oomguard.diagnosis.prior import Prior

FOLDS = 5


def ranked(row: Row, prior: Prior | None) -> list[str]:
    """The causes `diagnose` would list for the row, with or without the prior."""
    if not row.answered:
        return []
    shares = prior.shares(row.feats) if prior is not None else None
    return [c for c, _ in rank(row.scores, row.conf, shares)]


def hits(rows: list[Row], ranks: list[list[str]], k: int) -> int:
    return sum(r.want in rk[:k] for r, rk in zip(rows, ranks, strict=True))


def fold_line(name: str, r: list[int]) -> str:
    n = r[0]
    return (
        f"  {name:<7} n={n:<4} rules alone {r[1] / n:6.1%} {r[2] / n:6.1%}"
        f"   rules + prior at places 2+ {r[3] / n:6.1%} {r[4] / n:6.1%}"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0", help="comma-separated fold seeds")
    parser.add_argument("--c", default="0.3", help="comma-separated inverse regularisation strengths")
    args = parser.parse_args(argv)
    dev = [Row(r) for r in load(DEV)]
    tune = [Row(r) for r in load(TUNE)]
    print(f"train: {len(dev)} dev + 4/5 of {len(tune)} tune; score the held-out fifth (top-1 top-3)")
    for c in [float(x) for x in args.c.split(",")]:
        for seed in [int(x) for x in args.seeds.split(",")]:
            folds = StratifiedKFold(FOLDS, shuffle=True, random_state=seed)
            totals = [0, 0, 0, 0, 0]
            print(f"\nC={c} fold seed={seed}")
            for n, (train_i, test_i) in enumerate(folds.split(tune, [r.want for r in tune]), 1):
                prior = Prior.from_payload(fit(dev + [tune[i] for i in train_i], c))
                test = [tune[i] for i in test_i]
                alone = [ranked(r, None) for r in test]
                both = [ranked(r, prior) for r in test]
                row = [len(test), hits(test, alone, 1), hits(test, alone, 3)]
                row += [hits(test, both, 1), hits(test, both, 3)]
                totals = [a + b for a, b in zip(totals, row, strict=True)]
                print(fold_line(f"fold {n}", row))
            print(fold_line("all", totals))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
