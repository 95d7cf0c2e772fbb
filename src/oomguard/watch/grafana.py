"""A Grafana dashboard over the series `oomguard rules` records: one panel per detector's input."""

from __future__ import annotations

import json
from typing import Any

from oomguard.watch.prom_rules import P, RuleOptions

DASHBOARD_SCHEMA_VERSION = 39  # Grafana 10/11 dashboards
PANEL_W, PANEL_H = 12, 8  # Grafana's grid is 24 columns wide


def _panel(index: int, title: str, unit: str, targets: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "id": index + 1,
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": PANEL_H, "w": PANEL_W, "x": (index % 2) * PANEL_W, "y": (index // 2) * PANEL_H},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def dashboard(options: RuleOptions | None = None) -> dict[str, Any]:
    o = options or RuleOptions()
    rank = "{{instance}} engine {{engine}}"
    panels = [
        ("KV cache usage", "percentunit", [(f"{P}vllm_kv_cache_usage:ratio", rank)]),
        (
            "Waiting queue",
            "short",
            [(f"{P}vllm_requests_waiting", rank), (f"{P}vllm_requests_running", "running " + rank)],
        ),
        ("Preemptions per minute", "short", [(f"{P}vllm_preemptions:rate_per_min", rank)]),
        (
            "DP imbalance (KV usage, (max-min)/mean)",
            "percentunit",
            [(f"{P}vllm_dp_imbalance:ratio", "{{job}} {{model_name}}")],
        ),
        (
            "GPU memory",
            "bytes",
            [
                (f"{P}gpu_memory_used:bytes", "used gpu {{gpu}} {{instance}}"),
                (f"{P}gpu_memory_total:bytes", "total gpu {{gpu}} {{instance}}"),
            ],
        ),
        (
            "Container memory vs limit",
            "bytes",
            [
                (f"{P}container_memory_working_set:bytes", "{{pod}} {{container}}"),
                (f"{P}container_memory_limit:bytes", "limit {{pod}} {{container}}"),
            ],
        ),
    ]
    return {
        "title": f"{o.group}: vLLM memory",
        "uid": f"{o.group}-vllm-memory",
        "schemaVersion": DASHBOARD_SCHEMA_VERSION,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "tags": ["vllm", "oomguard"],
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"}
            ]
        },
        "panels": [_panel(i, title, unit, targets) for i, (title, unit, targets) in enumerate(panels)],
    }


def dashboard_json(options: RuleOptions | None = None) -> str:
    return json.dumps(dashboard(options), indent=2) + "\n"
