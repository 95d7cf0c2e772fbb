"""One place per concept: units, version rules and closed sets are defined once and read from there."""

from __future__ import annotations

import json
import re
from pathlib import Path

from oomguard.engines.vllm.versions import behaviour_or_newest
from oomguard.kinds import Failure, Provenance, Usage

SRC = Path(__file__).resolve().parents[1] / "src" / "oomguard"


def test_no_module_but_units_defines_a_gib() -> None:
    own = re.compile(r"^_?(GiB|GIB|MiB|MIB)\s*=", re.MULTILINE)
    offenders = [p.name for p in SRC.rglob("*.py") if p.name != "units.py" and own.search(p.read_text())]
    assert offenders == []


def test_no_source_cites_a_document_outside_the_repository() -> None:
    cited = re.compile(r"\b(ACCOUNTING|DESIGN|STYLE)\.md\b|\.\./shared")
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if cited.search(p.read_text())]
    assert offenders == []


def test_closed_sets_compare_and_print_as_their_wire_names() -> None:
    assert Failure.NO_KV_MEMORY == "no-kv-memory" and f"({Failure.MAX_MODEL_LEN})" == "(max-model-len)"
    assert json.dumps({"failure": Failure.SAMPLER_WARMUP}) == '{"failure": "sampler-warmup"}'
    assert {"exact": 1}[Provenance.EXACT] == 1 and Usage("llm") is Usage.LLM


def test_the_version_table_answers_for_a_version_read_from_a_log() -> None:
    assert behaviour_or_newest(None).default_gpu_memory_utilization == 0.92  # newest known rules
    assert behaviour_or_newest("0.10.2").default_gpu_memory_utilization == 0.9  # before PR #38284
    assert behaviour_or_newest("v0.21.0").cuda_graphs_in_budget
    assert behaviour_or_newest("0.5.4").default_gpu_memory_utilization == 0.9  # older: the oldest known rules
    assert behaviour_or_newest("not a version").version == behaviour_or_newest(None).version


def test_version_dependent_rules_are_fields_of_the_version_table() -> None:
    assert not behaviour_or_newest("0.9.2").hybrid_kv_cache_manager
    assert behaviour_or_newest("0.10.0").hybrid_kv_cache_manager
    assert behaviour_or_newest("0.32.0").partial_prefill_threshold_default
    assert not behaviour_or_newest("0.33.0").partial_prefill_threshold_default
    assert (
        behaviour_or_newest("0.17.0").non_torch_single_gpu_bytes
        < behaviour_or_newest("0.18.0").non_torch_single_gpu_bytes
    )
    engines = Path(__file__).resolve().parents[1] / "src" / "oomguard" / "engines" / "vllm"
    literal_versions = re.compile(r'V\("\d')
    assert [
        p.name
        for p in engines.glob("*.py")
        if p.name != "versions.py" and literal_versions.search(p.read_text())
    ] == []
