"""The learned prior and its blend with the rules: the shipped weights match the corpus they claim to be
trained on, the pure-Python scorer gives scikit-learn's probabilities, the allocator's quantities reach it as
shares of the device, the blend at weight 0 is the ranking without a blend (the rules' first cause, the prior
ordering the rest) and the weight is the shipped one, and a cause listed only by the prior says so."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from oomguard.diagnosis import diagnosis
from oomguard.diagnosis.diagnosis import MIN_PRIOR_ONLY, TOP, _confidences, failing_step, rank
from oomguard.diagnosis.evidence import Evidence
from oomguard.diagnosis.prior import Prior, features, shipped, words
from oomguard.diagnosis.read import read_one
from oomguard.diagnosis.rules import CLASSES, score
from oomguard.diagnosis.setup import recover_setup

BENCH = Path(__file__).resolve().parents[2] / "bench"
TUNE = BENCH / "data" / "oom_corpus" / "tune.jsonl"
# A runtime OOM with a gap between reserved and allocated (https://github.com/vllm-project/vllm/issues/27466).
RESERVED_GAP = (
    "(EngineCore_DP0 pid=8402) ERROR 10-24 01:26:57 [core.py:710] torch.OutOfMemoryError: CUDA out of "
    "memory. Tried to allocate 960.00 MiB. GPU 0 has a total capacity of 79.14 GiB of which 712.75 MiB is "
    "free. Process 854401 has 78.43 GiB memory in use. Of the allocated memory 74.06 GiB is allocated by "
    "PyTorch, with 159.88 MiB allocated in private pools (e.g., CUDA Graphs), and 2.22 GiB is reserved by "
    "PyTorch but unallocated.\n"
)
# Another process holds most of the device (https://github.com/ai-dynamo/dynamo/issues/285).
SHARED_GPU = (
    "ERROR 03-21 15:57:35 engine.py:518] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
    "1.70 GiB. GPU 0 has a total capacity of 79.20 GiB of which 87.06 MiB is free. Process 9171 has 54.89 "
    "GiB memory in use. Including non-PyTorch memory, this process has 24.20 GiB memory in use. Of the "
    "allocated memory 23.53 GiB is allocated by PyTorch, and 17.43 MiB is reserved by PyTorch but "
    "unallocated.\n"
)


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


def _toy_payload(
    favoured: str, feature: str = "fact:x", blend_weight: float = 0.0, prior_first_below: float = 0.0
) -> dict[str, Any]:
    return {
        "classes": list(CLASSES),
        "intercepts": [0.0] * len(CLASSES),
        "weights": {feature: [8.0 if c == favoured else 0.0 for c in CLASSES]},
        "temperature": 1.0,
        "blend_weight": blend_weight,
        "prior_first_below": prior_first_below,
        "meta": {},
    }


def _toy_prior(favoured: str) -> Prior:
    return Prior.from_payload(_toy_payload(favoured))


def test_first_cause_stays_the_rules_and_the_prior_orders_the_rest() -> None:
    first, second, favoured = CLASSES[0], CLASSES[1], CLASSES[5]
    scores = dict.fromkeys(CLASSES, 0.0) | {first: 2.0, second: 1.0}
    conf = dict.fromkeys(CLASSES, 0.0) | {first: 0.3, second: 0.08}
    alone = rank(scores, conf, None)
    assert [c for c, _ in alone] == [first, second]
    both = rank(scores, conf, _toy_prior(favoured).shares(["fact:x"]))
    names = [c for c, _ in both]
    assert names[0] == first and names[1] == favoured and names[2] == second and len(both) == 3
    shown = [p for _, p in both]
    assert shown == sorted(shown, reverse=True)
    # the prior's share of what the rules leave raises the favoured class above the first: capped, in order
    assert shown[1] == shown[0]


def test_below_the_threshold_the_prior_orders_the_causes_but_never_one_the_evidence_argues_against() -> None:
    first, against, favoured = CLASSES[0], CLASSES[1], CLASSES[5]
    scores = dict.fromkeys(CLASSES, 0.0) | {first: 2.0}
    conf = dict.fromkeys(CLASSES, 0.0) | {first: 0.25}
    shares = _toy_prior(favoured).shares(["fact:x"])
    # At or above the threshold the rules keep the first place.
    assert rank(scores, conf, shares, 0.1, prior_first_below=0.25)[0][0] == first
    # Below it the prior's favourite comes first with the prior's share shown, the rules' cause after it.
    gated = rank(scores, conf, shares, 0.1, prior_first_below=0.3)
    assert [c for c, _ in gated[:2]] == [favoured, first]
    assert gated[0][1] == pytest.approx(shares[favoured])
    # A class the evidence's quantities argue against is never named, however similar reports lean.
    against_scores = scores | {favoured: -1.0}
    assert favoured not in [c for c, _ in rank(against_scores, conf, shares, 0.1, prior_first_below=0.3)]
    assert against not in [c for c, _ in gated] or scores[against] >= 0


def test_a_cause_only_the_prior_lists_says_it_has_no_direct_evidence(run_diagnose: Any) -> None:
    # A reporter's sentence (https://github.com/InternLM/lmdeploy/pull/1434): no rule reads "vl model" as
    # the vision encoder; the prior, which has seen reports like it, ranks it among its first three.
    text = "The original implementation is easy to get OOM since there is no extra VRAM for the vl model.\n"
    ev = Evidence()
    read_one("paste.txt", io.BytesIO(text.encode()), ev)
    setup = recover_setup(ev)
    tally, sit = score(ev, setup, failing_step(ev, setup))
    shares = shipped().shares(features(ev, sit, setup))
    assert "multimodal-encoder" in sorted(shares, key=lambda c: -shares[c])[:3]
    assert tally.score("multimodal-encoder") <= 0
    code, data, _ = run_diagnose(text)
    assert code == 0
    # which classes the prior adds to the list may change with retraining; that they say so may not
    flagged = [c for c in data["causes"] if c["from_similar_reports_only"]]
    assert flagged and not data["causes"][0]["from_similar_reports_only"]
    assert all(not c["evidence"] and c["confidence"] >= MIN_PRIOR_ONLY - 0.001 for c in flagged)
    code, out, _ = run_diagnose(text, args=())
    assert flagged[0]["class"] in out and "(from similar reports, no direct evidence)" in out
    code, md, _ = run_diagnose(text, args=("--markdown",))
    assert "From similar reports, no direct evidence." in md


def _bench(name: str) -> ModuleType:
    """A bench script as a module (the prior's training lives there, with scikit-learn)."""
    pytest.importorskip("sklearn")
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _reports(shared_data: Path) -> list[tuple[str, dict[str, float], dict[str, float], list[str]]]:
    """Each dev and tune report with evidence as the ranking sees it: class, scores, confidences, features."""
    out = []
    for path in (shared_data / "validation" / "oom_reports_dev.jsonl", TUNE):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            ev = Evidence()
            read_one(row["id"], io.BytesIO(row["evidence"].encode()), ev)
            if not len(ev):
                continue
            setup = recover_setup(ev)
            tally, sit = score(ev, setup, failing_step(ev, setup))
            scores = {c: tally.score(c) for c in CLASSES}
            out.append((row["root_cause_class"], scores, _confidences(tally), features(ev, sit, setup)))
    return out


def _ranked_before_the_blend(
    scores: dict[str, float], conf: dict[str, float], shares: dict[str, float]
) -> list[tuple[str, float]]:
    """`diagnosis.rank` as it was before the blend (commit b40aaa8): the rules' first cause with its
    confidence, places 2.. by the confidence plus the prior's share of what the rules leave."""
    order = sorted(CLASSES, key=lambda c: (-scores[c], CLASSES.index(c)))
    left = max(0.0, 1.0 - sum(conf.values()))
    blended = {c: conf[c] + left * shares.get(c, 0.0) for c in CLASSES}
    rest = sorted(
        (c for c in order[1:] if scores[c] > 0 or blended[c] >= MIN_PRIOR_ONLY),
        key=lambda c: (-blended[c], CLASSES.index(c)),
    )
    shown = [(order[0], conf[order[0]])]
    for c in rest[: TOP - 1]:
        shown.append((c, min(blended[c], shown[-1][1])))
    return shown


def test_blend_at_weight_zero_is_the_ranking_before_it_and_at_one_the_priors_pick(shared_data: Path) -> None:
    prior = shipped()
    reports = _reports(shared_data)
    assert len(reports) >= 500
    moved = 0
    for _, scores, conf, feats in reports:
        shares = prior.shares(feats)
        assert rank(scores, conf, shares, 0.0) == _ranked_before_the_blend(scores, conf, shares)
        # at 1 the first cause is the prior's pick among the causes the rules found evidence for
        first, shown = rank(scores, conf, shares, 1.0)[0]
        supported = [c for c in CLASSES if scores[c] > 0] or list(CLASSES)
        assert scores[first] > 0 or not any(v > 0 for v in scores.values())
        assert shares[first] == max(shares[c] for c in supported) and shown == shares[first]
        halfway = rank(scores, conf, shares, 0.5)
        assert [p for _, p in halfway] == sorted((p for _, p in halfway), reverse=True)
        moved += halfway[0][0] != rank(scores, conf, shares, 0.0)[0][0]
    # the prior moves the first cause where the rules are unsure, not everywhere
    assert 0 < moved < len(reports) / 4


def test_the_blend_weight_is_the_shipped_priors(monkeypatch: pytest.MonkeyPatch, run_diagnose: Any) -> None:
    # RESERVED_GAP's causes by the rules, then by a toy prior in the payload that favours one cause: at
    # weight 0 the first cause stays the rules'; at 1 it is the favoured one when the rules gave it weight
    # (the gap between reserved and allocated: fragmentation first, a weak activation peak second), and never
    # one they gave none.
    assert Prior.from_payload(_toy_payload("other", blend_weight=0.35)).blend_weight == 0.35
    code, data, _ = run_diagnose(RESERVED_GAP)
    assert code == 0
    with_weight = [c["class"] for c in data["causes"] if not c["from_similar_reports_only"]]
    rules_first, second = with_weight[:2]
    assert rules_first == "fragmentation" and "int32-index-overflow" not in with_weight
    for weight, favoured, expected in (
        (0.0, second, rules_first),
        (1.0, second, second),
        (1.0, "int32-index-overflow", rules_first),
    ):
        toy = Prior.from_payload(_toy_payload(favoured, "oom:torch", weight))
        monkeypatch.setattr(diagnosis, "shipped", lambda toy=toy: toy)
        code, data, _ = run_diagnose(RESERVED_GAP)
        assert data["causes"][0]["class"] == expected
        assert not data["causes"][0]["from_similar_reports_only"]


def test_the_pure_python_scorer_gives_scikit_learns_probabilities(shared_data: Path) -> None:
    train_prior = _bench("train_prior")
    rows = [
        train_prior.Row(r) for r in train_prior.load(shared_data / "validation" / "oom_reports_dev.jsonl")
    ]
    rows += [train_prior.Row(r) for r in train_prior.load(TUNE)[:120]]
    vec, model = train_prior.model(rows)
    prior = Prior.from_payload(train_prior.payload_of(vec, model))
    assert prior.temperature == 1.0
    for row in rows[::7]:
        want = model.predict_proba(vec.transform([train_prior.design(row.feats)]))[0]
        got = prior.shares(row.feats)
        for k, cls in enumerate(model.classes_):
            assert abs(got[str(cls)] - want[k]) < 0.005  # the shipped weights are rounded to 3 decimals
    hotter = replace(prior, temperature=2.0).shares(rows[0].feats)
    assert max(hotter.values()) < max(prior.shares(rows[0].feats).values())


def test_the_allocators_quantities_reach_the_prior_as_shares_of_the_device() -> None:
    def feats(text: str) -> set[str]:
        ev = Evidence()
        read_one("paste.txt", io.BytesIO(text.encode()), ev)
        setup = recover_setup(ev)
        _, sit = score(ev, setup, failing_step(ev, setup))
        return {f for f in features(ev, sit, setup) if f.startswith("oom:") and "/" in f}

    # 54.89 of 79.2 GiB held by another process; 1.7 GiB asked of 87 MiB free; no gap
    assert {"oom:others/total=3", "oom:request/free=2", "oom:unallocated/total=0"} <= feats(SHARED_GPU)
    # the one process listed is the engine itself; 2.22 GiB reserved but unallocated is ~3% of the device
    assert {"oom:others/total=0", "oom:unallocated/total=1", "oom:pools/total=0"} <= feats(RESERVED_GAP)
