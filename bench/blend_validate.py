"""The blend of the rules and the learned prior, measured on reports neither has seen: choose the weight.

Trains the prior exactly as bench/train_prior.py does (dev + tune; the model and its cross-validated
temperature; nothing is written), reads FILE (corpus rows: `id`, `evidence`, `root_cause_class`) and ranks
each report by `diagnosis.rank` at each weight of --w: 0 is `diagnose` without a blend (the rules' first
cause, the prior ordering places 2..), 1 the prior alone at the first place. Prints top-1 / top-3 per weight
and how often the first cause is right in each confidence band (the confidence shown should mean what it says
at the chosen weight), with the rules alone and the prior alone beside them. Run it once on reports kept out
of every tuning (a fresh harvest round's tuning part): a weight chosen on reports the rules or the prior were
fitted to measures their fit, not the blend. Ship the chosen weight as train_prior.BLEND_WEIGHT and retrain.
Needs scikit-learn (the `bench` extra).

With --below, the same at the shipped weight for each threshold below which the prior orders the causes
(`diagnosis.rank`'s prior_first_below; 0: never). bench/held_out_rounds.py measures both on every earlier
round with the code that had not seen it.

Usage: python bench/blend_validate.py FILE.jsonl [--w 0,0.1,0.2,0.3,0.4,0.5,0.6,0.8,1] [--below 0,0.2,0.3,0.4]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_prior import BLEND_WEIGHT, DEV, TUNE, Row, load, train

from oomguard.diagnosis.diagnosis import rank
from oomguard.diagnosis.prior import Prior

WEIGHTS = "0,0.1,0.2,0.3,0.4,0.5,0.6,0.8,1"
THRESHOLDS = "0,0.2,0.3,0.4,0.5"
# Confidence bands of the first cause (bench/diagnose_accuracy.py's), lower bounds.
BANDS = (0.7, 0.5, 0.3, 0.0)


class BadInput(Exception):
    """An argument this bench cannot use: one line to the user, exit 2."""


def read_rows(path: Path) -> list[Row]:
    """FILE's reports (corpus rows), or BadInput naming what is wrong with it."""
    try:
        rows = [Row(r) for r in load(path)]
    except OSError as err:
        raise BadInput(f"cannot read {path}: {err.strerror}") from None
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise BadInput(f"{path} is not a JSONL of corpus rows: {type(err).__name__}: {err}") from None
    if not rows:
        raise BadInput(f"{path} holds no reports")
    return rows


def weights_of(text: str, option: str = "--w") -> list[float]:
    try:
        weights = [float(w) for w in text.split(",")]
    except ValueError:
        raise BadInput(f"{option} takes comma-separated numbers, not {text!r}") from None
    if any(not 0.0 <= w <= 1.0 for w in weights):
        raise BadInput(f"each {option} value must be in [0, 1], not {text!r}")
    return weights


def line(name: str, ranked: list[list[tuple[str, float]]], rows: list[Row]) -> str:
    n = len(rows)
    top1 = sum(bool(r) and r[0][0] == row.want for r, row in zip(ranked, rows, strict=True))
    top3 = sum(row.want in [c for c, _ in r[:3]] for r, row in zip(ranked, rows, strict=True))
    bands: list[str] = []
    high = 1.01
    for low in BANDS:
        band = [
            row.want == r[0][0] for r, row in zip(ranked, rows, strict=True) if r and low <= r[0][1] < high
        ]
        bands.append(f"{sum(band)}/{len(band)}")
        high = low
    return f"  {name:<14} {top1:>4} {top1 / n:6.1%} {top3:>4} {top3 / n:6.1%}   " + "  ".join(
        f"{b:>7}" for b in bands
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", type=Path, help="corpus rows (JSONL) neither the rules nor the prior saw")
    parser.add_argument("--w", default=WEIGHTS, help="comma-separated blend weights in [0, 1]")
    parser.add_argument(
        "--below",
        default=THRESHOLDS,
        help="comma-separated thresholds in [0, 1] below which the prior orders",
    )
    args = parser.parse_args(argv)
    try:
        weights = weights_of(args.w)
        thresholds = weights_of(args.below, "--below")
        if args.file.resolve() in (DEV.resolve(), TUNE.resolve()):
            raise BadInput(f"{args.file} is training data for the prior; give reports it has not seen")
        rows = read_rows(args.file)
    except BadInput as err:
        print(f"blend_validate: {err}", file=sys.stderr)
        return 2
    dev, tune = [Row(r) for r in load(DEV)], [Row(r) for r in load(TUNE)]
    prior = Prior.from_payload(train(dev, tune))
    print(
        f"prior trained on {prior.meta['rows']} dev + tune reports (temperature {prior.temperature}); "
        f"{len(rows)} reports in {args.file.name}, {sum(r.answered for r in rows)} with evidence"
    )
    print(f"  {'':<14} {'top-1':>11} {'top-3':>11}   first cause right / listed at >=70% 50-70% 30-50% <30%")
    shares = [prior.shares(r.feats) if r.answered else {} for r in rows]
    alone = [rank(r.scores, r.conf, None, shown=r.shown) if r.answered else [] for r in rows]
    print(line("rules alone", alone, rows))
    by_prior = [sorted(s.items(), key=lambda kv: -kv[1]) for s in shares]
    print(line("prior alone", by_prior, rows))
    for w in weights:
        ranked = [
            rank(r.scores, r.conf, s, w, shown=r.shown) if r.answered else []
            for r, s in zip(rows, shares, strict=True)
        ]
        print(line(f"blend w={w:g}", ranked, rows))
    for t in thresholds:
        ranked = [
            rank(r.scores, r.conf, s, BLEND_WEIGHT, t, r.shown) if r.answered else []
            for r, s in zip(rows, shares, strict=True)
        ]
        print(line(f"below {t:g}", ranked, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
