"""The host ledger against real host-OOM reports (the cases bench/host_vs_reports.py scores).

Cases are transcribed from the development sets only (the validation reports and the corpus's tune split);
the frozen split is never read.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from oomguard.host.ledger import HostStep

REPO = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("host_vs_reports", REPO / "bench" / "host_vs_reports.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["host_vs_reports"] = module
    spec.loader.exec_module(module)
    return module


BENCH = _bench()
CASES: list[dict[str, Any]] = BENCH.load_cases()


def _case(report: str, name: str) -> dict[str, Any]:
    return next(c for c in CASES if c["id"] == report and c["case"] == name)


def test_every_case_is_a_report_of_a_development_set(shared_data: Path) -> None:
    ids = BENCH.corpus_ids()
    assert set(ids) == {"dev", "tune"}
    for case in CASES:
        assert case["id"] in ids[case["corpus"]], case["id"]
    frozen = {
        json.loads(x)["id"]
        for x in (REPO / "bench/data/oom_corpus/frozen.jsonl").read_text().splitlines()
        if x
    }
    assert not frozen & {c["id"] for c in CASES}


def test_cases_the_ledger_does_not_plan_say_why() -> None:
    for case in CASES:
        if case["modelled"]:
            assert case["command"] and case["vllm_version"], case["id"]
        else:
            assert case["why_not"], case["id"]


def test_the_setup_that_was_killed_needs_more_than_the_one_that_loaded_on_the_same_nodes() -> None:
    loaded = BENCH.ledger_for(_case("vllm-44430-runai-streamer-host-oom-tp-ray", "Llama-3.3-70B (loads)"))
    killed = BENCH.ledger_for(_case("vllm-44430-runai-streamer-host-oom-tp-ray", "Llama-4-Scout (OOM)"))
    assert killed.peak_bytes > loaded.peak_bytes
    assert loaded.peak_step is HostStep.LOAD  # the streamer's buffers, four workers at once


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c["modelled"] and c["limit"] and c["reported_outcome"] == "oom-killed"],
    ids=lambda c: f"{c['id']}:{c['case']}",
)
def test_stated_limit_reports_die_at_the_reported_step(case: dict[str, Any]) -> None:
    ledger = BENCH.ledger_for(case)
    assert ledger.dies_at is not None and ledger.dies_at.value == case["reported_step"]
