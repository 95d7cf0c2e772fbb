"""Split a freshly harvested round of OOM reports into the tuning part and the frozen test split.

Run once per round, when its rows land and before any diagnose rule is changed against them:

    python3 bench/split_corpus.py --seed 20261203 bench/data/oom_corpus/harvest3-*.jsonl

30% of each root-cause class goes to `frozen.jsonl` (`round(0.3 x n)`, drawn with `random.Random(seed).sample`
over that class's reports sorted by id), the rest to `tune.jsonl`; the harvest files are removed. The rows are
moved, never printed: nobody reads the frozen ones.

`--hold NAME` writes the two parts to NAME-tune.jsonl and NAME-frozen.jsonl beside the corpus instead: a round
held out of every change (rules and the learned prior alike) until it is scored as never-seen reports; the
parts are appended to tune.jsonl and frozen.jsonl after that.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import defaultdict
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "data" / "oom_corpus"
FROZEN_SHARE = 0.3


def split(
    rows: list[dict[str, object]], seed: int
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    by_class: dict[str, list[dict[str, object]]] = defaultdict(list)
    for row in rows:
        by_class[str(row["root_cause_class"])].append(row)
    rng = random.Random(seed)
    tune: list[dict[str, object]] = []
    frozen: list[dict[str, object]] = []
    for cls in sorted(by_class):
        members = sorted(by_class[cls], key=lambda r: str(r["id"]))
        chosen = {id(r) for r in rng.sample(members, round(FROZEN_SHARE * len(members)))}
        for row in members:
            (frozen if id(row) in chosen else tune).append(row)
    return tune, frozen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--hold", metavar="NAME", help="write NAME-tune.jsonl / NAME-frozen.jsonl instead")
    parser.add_argument("harvests", nargs="+", type=Path)
    args = parser.parse_args()
    rows = [
        json.loads(line) for path in args.harvests for line in path.read_text().splitlines() if line.strip()
    ]
    known = {
        (r["source_url"], r["evidence"])
        for name in ("tune.jsonl", "frozen.jsonl")
        for r in map(json.loads, (CORPUS / name).read_text().splitlines())
    }
    fresh = [r for r in rows if (r["source_url"], r["evidence"]) not in known]
    ids = [r["id"] for r in fresh]
    if len(set(ids)) != len(ids):
        print("split_corpus: duplicate ids in the harvest", file=sys.stderr)
        return 2
    tune, frozen = split(fresh, args.seed)
    names = (
        (f"{args.hold}-tune.jsonl", f"{args.hold}-frozen.jsonl")
        if args.hold
        else ("tune.jsonl", "frozen.jsonl")
    )
    for name, part in zip(names, (tune, frozen), strict=True):
        with (CORPUS / name).open("a") as out:
            out.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in part)
    for path in args.harvests:
        path.unlink()
    print(f"{len(fresh)} reports: {len(tune)} to {names[0]}, {len(frozen)} to {names[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
