"""`oomguard rules`: thresholds and selectors land in the PromQL; the output is valid YAML and JSON."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml
from tests.run_oomguard import oomguard


def _rules(*args: str) -> subprocess.CompletedProcess[str]:
    return oomguard("rules", *args)


def _by_name(text: str) -> dict[str, dict]:
    groups = yaml.safe_load(text)["groups"]
    return {r.get("alert") or r["record"]: r for g in groups for r in g["rules"]}


def test_thresholds_and_selector_appear_in_the_expressions() -> None:
    result = _rules(
        "--selector",
        'job="vllm"',
        "--imbalance",
        "0.2",
        "--horizon",
        "3h",
        "--kv-high",
        "0.9",
        "--for",
        "10m",
    )
    assert result.returncode == 0, result.stderr
    rules = _by_name(result.stdout)
    assert rules["OomguardDpImbalance"]["expr"].startswith("oomguard:vllm_dp_imbalance:ratio > 0.2 ")
    assert "< 10800" in rules["OomguardGpuMemoryLeak"]["expr"]
    assert ">= 0.9" in rules["OomguardKvCacheFull"]["expr"]
    assert rules["oomguard:vllm_kv_cache_usage:ratio"]["expr"] == (
        'vllm:kv_cache_usage_perc{job="vllm"} or vllm:gpu_cache_usage_perc{job="vllm"}'
    )
    assert rules["OomguardPreemptions"]["for"] == "10m"


def test_every_alert_has_a_severity_summary_and_fix() -> None:
    rules = _by_name(_rules().stdout)
    alerts = [r for r in rules.values() if "alert" in r]
    assert len(alerts) == 10
    assert all(r["labels"]["severity"] in ("warning", "critical") and r["annotations"]["fix"] for r in alerts)


def test_output_file_and_grafana_dashboard_are_written(tmp_path: Path) -> None:
    out, dash = tmp_path / "rules.yml", tmp_path / "dash.json"
    result = _rules("-o", str(out), "--grafana", str(dash))
    assert result.returncode == 0 and result.stdout == ""
    recorded = {name for name, r in _by_name(out.read_text()).items() if "record" in r}
    dashboard = json.loads(dash.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert exprs and all(e in recorded for e in exprs)  # the dashboard only plots what the rules record


def test_bad_values_and_unwritable_files_are_one_line_exit_2(tmp_path: Path) -> None:
    for args in (
        ["--imbalance", "lots"],
        ["--horizon", "soon"],
        ["-o", str(tmp_path / "no" / "such" / "dir.yml")],
        ["--selector", 'job="vllm'],
    ):
        result = _rules(*args)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)
