"""The learned prior that orders the causes after the rules' first one: the shipped weights match the corpus
they claim to be trained on, the scorer is a proper distribution, the first cause stays the rules', and a
cause listed only by the prior says so."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from oomguard.diagnosis.diagnosis import MIN_PRIOR_ONLY, rank
from oomguard.diagnosis.prior import Prior, shipped, words
from oomguard.diagnosis.rules import CLASSES

TUNE = Path(__file__).resolve().parents[2] / "bench" / "data" / "oom_corpus" / "tune.jsonl"


def _rows(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())


def test_shipped_prior_is_trained_on_the_committed_dev_and_tune_reports(shared_data: Path) -> None:
    dev = shared_data / "validation" / "oom_reports_dev.jsonl"
    prior = shipped()
    digest = hashlib.sha256(dev.read_bytes() + TUNE.read_bytes()).hexdigest()
    assert prior.meta["corpus_sha256"] == digest, "stale prior: rerun python bench/train_prior.py"
    assert prior.classes == CLASSES
    assert prior.meta["dev_reports"] == _rows(dev)
    assert prior.meta["tune_reports"] == _rows(TUNE)
    # trained on the reports with evidence: all but the few the readers find nothing in
    assert 0.95 * (_rows(dev) + _rows(TUNE)) <= prior.meta["rows"] <= _rows(dev) + _rows(TUNE)
    assert len(prior.intercepts) == len(CLASSES)
    assert all(len(ws) == len(CLASSES) for ws in prior.weights.values())


def test_shares_are_a_distribution_moved_by_the_features_weights() -> None:
    prior = shipped()
    base = prior.shares([])
    assert abs(sum(base.values()) - 1.0) < 1e-9
    feature, ws = max(prior.weights.items(), key=lambda kv: max(kv[1]))
    favoured = CLASSES[ws.index(max(ws))]
    assert prior.shares([feature])[favoured] > base[favoured]
    assert prior.shares([feature, "w:never-seen-feature"]) == prior.shares([feature])


def test_words_mask_numbers_hex_paths_and_log_prefixes() -> None:
    line = "INFO 03-04 10:11:12 [gpu_model_runner.py:1234] /opt/vllm/worker.py 0xdeadbeef took 12.5 GiB"
    assert words(line) == ["info", "gpu_model_runner", "py", "worker", "py", "took", "gib"]


def _toy_prior(favoured: str) -> Prior:
    payload: dict[str, Any] = {
        "classes": list(CLASSES),
        "intercepts": [0.0] * len(CLASSES),
        "weights": {"w:x": [8.0 if c == favoured else 0.0 for c in CLASSES]},
        "meta": {},
    }
    return Prior.from_payload(payload)


def test_first_cause_stays_the_rules_and_the_prior_orders_the_rest() -> None:
    first, second, favoured = CLASSES[0], CLASSES[1], CLASSES[5]
    scores = dict.fromkeys(CLASSES, 0.0) | {first: 2.0, second: 1.0}
    conf = dict.fromkeys(CLASSES, 0.0) | {first: 0.3, second: 0.08}
    alone = rank(scores, conf, None)
    assert [c for c, _ in alone] == [first, second]
    both = rank(scores, conf, _toy_prior(favoured).shares(["w:x"]))
    names = [c for c, _ in both]
    assert names[0] == first and names[1] == favoured and names[2] == second and len(both) == 3
    shown = [p for _, p in both]
    assert shown == sorted(shown, reverse=True)
    # the prior's share of what the rules leave raises the favoured class above the first: capped, in order
    assert shown[1] == shown[0]


def test_a_cause_only_the_prior_lists_says_it_has_no_direct_evidence(run_diagnose: Any) -> None:
    # A reporter's sentence (https://github.com/InternLM/lmdeploy/pull/1434): no rule reads "vl model" as
    # the vision encoder, reports like it were multimodal ones.
    text = "The original implementation is easy to get OOM since there is no extra VRAM for the vl model.\n"
    code, data, _ = run_diagnose(text)
    assert code == 0
    flagged = [c for c in data["causes"] if c["from_similar_reports_only"]]
    # the shipped prior was trained on this report (a tune row): which other classes it adds may change with
    # retraining, the vision encoder among them may not
    assert "multimodal-encoder" in [c["class"] for c in flagged]
    assert not data["causes"][0]["from_similar_reports_only"]
    assert all(not c["evidence"] and c["confidence"] >= MIN_PRIOR_ONLY - 0.001 for c in flagged)
    code, out, _ = run_diagnose(text, args=())
    assert "multimodal-encoder" in out and "(from similar reports, no direct evidence)" in out
    code, md, _ = run_diagnose(text, args=("--markdown",))
    assert "From similar reports, no direct evidence." in md
