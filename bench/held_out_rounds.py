"""The rules and the learned prior on reports neither had seen: every earlier harvest round, ranked by the
code of the commit before that round joined the corpus, with the prior trained on every other report.

Each round of the corpus was held out of every change until its session ended (bench/data/oom_corpus/
README.md), so a commit from before it joined (ROUND_CODE) is code that never saw it. For each such commit a
temporary git worktree runs that commit's own bench/train_prior.Row over the development reports and today's
tuning part (the rules' scores and confidences, and that code's prior features, in a subprocess); the words of
each report's text join the features as today's prior reads them (prior.features, "r:" words). Then for each
round the prior is trained as bench/train_prior.py trains it (the model and its cross-validated temperature)
on every report outside the round, and the round's tuning part is ranked: the rules alone, the prior alone,
the blend at the shipped weight, and the blend with the prior ordering the causes below each --below
threshold of the rules' first confidence. These are the numbers the blend's weight and threshold are chosen
on (bench/blend_validate.py measures one new round the same way). The frozen split is never read.

Needs the repository's git history and scikit-learn (the `bench` extra); takes about a minute.

Usage: python bench/held_out_rounds.py [--below 0,0.2,0.3,0.4,0.5] [--w 0.1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from blend_validate import BadInput, weights_of
from diagnose_accuracy import ROUND_OF_HARVESTER
from train_prior import BLEND_WEIGHT, DEV, ROOT, TUNE, train

from oomguard.diagnosis.causes import CauseClass
from oomguard.diagnosis.diagnosis import CONFIDENCE_FLOOR, confidences_of, rank
from oomguard.diagnosis.prior import Prior, words

# A commit from before each round joined the corpus (the last one, or for round 8 the last before the fixes
# made while it joined): its code had never seen the round.
ROUND_CODE = {4: "c8f2259^", 5: "cad9d21^", 6: "cad9d21^", 7: "1267f96^", 8: "0990875", 9: "3422845"}
THRESHOLDS = "0,0.2,0.3,0.4,0.5"
BANDS = (0.7, 0.5, 0.3, 0.0)

# What the older commit's own Row computes, as JSON (run with that commit's src on the path).
DUMP = """
import json, sys
sys.path.insert(0, sys.argv[1] + "/bench")
from pathlib import Path
from train_prior import Row, load
out = []
for split, path in (("dev", sys.argv[2]), ("tune", sys.argv[3])):
    for r in load(Path(path)):
        row = Row(r)
        out.append({"split": split, "harvester": r.get("harvester"), "want": row.want,
                    "answered": row.answered, "feats": row.feats,
                    "scores": {str(k): v for k, v in row.scores.items()},
                    "conf": {str(k): v for k, v in row.conf.items()}, "evidence": r["evidence"]})
json.dump(out, sys.stdout)
"""


@dataclass
class Report:
    """One report as an older commit's rules and prior features saw it (the shape train_prior.train reads)."""

    want: str
    answered: bool
    feats: list[str]
    scores: dict[CauseClass, float]
    conf: dict[CauseClass, float]
    round: int
    extra: list[str] = field(default_factory=list)

    @property
    def shown(self) -> dict[CauseClass, float]:
        """The confidences `diagnose` shows now, from the rule scores (diagnosis.CONFIDENCE_FLOOR)."""
        return confidences_of(self.scores, CONFIDENCE_FLOOR)

    @classmethod
    def of(cls, item: dict[str, object]) -> Report:
        text = str(item["evidence"])
        heads = sorted({f"r:{w}" for line in text.splitlines() for w in words(line)})
        scores = {CauseClass(k): float(v) for k, v in dict(item["scores"]).items()}  # type: ignore[call-overload]
        conf = {CauseClass(k): float(v) for k, v in dict(item["conf"]).items()}  # type: ignore[call-overload]
        round_ = 0 if item["split"] == "dev" else ROUND_OF_HARVESTER.get(str(item["harvester"]), 0)
        # (a commit from this one on reads the heads' words itself: each feature once)
        feats = sorted(set(item["feats"]) | set(heads))  # type: ignore[call-overload]
        return cls(str(item["want"]), bool(item["answered"]), feats, scores, conf, round_)


def reports_at(commit: str) -> list[Report]:
    """Dev + today's tuning part read by `commit`'s code (a temporary worktree of it)."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), commit], check=True
        )
        try:
            done = subprocess.run(
                [sys.executable, "-c", DUMP, str(tree), str(DEV), str(TUNE)],
                check=True,
                capture_output=True,
                text=True,
                env={"PYTHONPATH": str(tree / "src"), "PATH": "/usr/bin:/bin"},
            )
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)
    return [Report.of(item) for item in json.loads(done.stdout)]


Ranked = list[tuple[CauseClass, float]] | list[tuple[str, float]]
Ranker = Callable[[Report, dict[str, float]], Ranked]


def rankers(weight: float, thresholds: list[float]) -> dict[str, Ranker]:
    out: dict[str, Ranker] = {
        "rules alone": lambda r, s: rank(r.scores, r.conf, None, shown=r.shown),
        "prior alone": lambda r, s: sorted(s.items(), key=lambda kv: -kv[1]),
    }
    for t in thresholds:
        out[f"w={weight:g} below {t:g}"] = lambda r, s, t=t: rank(r.scores, r.conf, s, weight, t, r.shown)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--below", default=THRESHOLDS, help="comma-separated thresholds in [0, 1]")
    parser.add_argument("--w", default=str(BLEND_WEIGHT), help="the blend weight")
    args = parser.parse_args(argv)
    try:
        thresholds = weights_of(args.below, "--below")
        (weight,) = weights_of(args.w)
    except (BadInput, ValueError) as err:
        print(f"held_out_rounds: {err}", file=sys.stderr)
        return 2
    names = list(rankers(weight, thresholds))
    total = {name: [0, 0] for name in names}
    bands = {name: [[0, 0] for _ in BANDS] for name in names}
    n_all = 0
    print(f"{'':34} {'top-1':>9} {'top-3':>9}")
    for commit in dict.fromkeys(ROUND_CODE.values()):
        try:
            reports = reports_at(commit)
        except subprocess.CalledProcessError as err:
            print(
                f"held_out_rounds: could not run the code of {commit} ({err.cmd[0]} exit {err.returncode}): "
                "it needs the repository's full git history (not a shallow clone)",
                file=sys.stderr,
            )
            return 2
        for round_ in [r for r, c in ROUND_CODE.items() if c == commit]:
            held = [r for r in reports if r.round == round_]
            prior = Prior.from_payload(
                train(
                    [r for r in reports if r.round == 0], [r for r in reports if r.round not in (0, round_)]
                )  # type: ignore[arg-type]
            )
            n_all += len(held)
            print(f"round {round_} ({len(held)} tuning reports), rules of {commit}")
            for name, ranker in rankers(weight, thresholds).items():
                top1 = top3 = 0
                for r in held:
                    ranked = [(str(c), p) for c, p in ranker(r, prior.shares(r.feats))] if r.answered else []
                    names_ = [c for c, _ in ranked]
                    top1 += names_[:1] == [r.want]
                    top3 += r.want in names_[:3]
                    if ranked:
                        b = next(i for i, low in enumerate(BANDS) if ranked[0][1] >= low)
                        bands[name][b][0] += names_[0] == r.want
                        bands[name][b][1] += 1
                total[name][0] += top1
                total[name][1] += top3
                print(f"  {name:<32} {top1:>3} {top1 / len(held):5.1%} {top3:>3} {top3 / len(held):5.1%}")
    print(
        f"all {n_all} held-out tuning reports          first cause right / listed at >=70% 50-70% 30-50% <30%"
    )
    for name in names:
        top1, top3 = total[name]
        shown = "  ".join(f"{f'{k}/{n}':>7}" for k, n in bands[name])
        print(f"  {name:<32} {top1:>3} {top1 / n_all:5.1%} {top3:>3} {top3 / n_all:5.1%}   {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
