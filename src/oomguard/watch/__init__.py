"""`oomguard watch` and `oomguard rules`: see an OOM coming on one server or a fleet.

Flow: sources (scrape.py /metrics, nvml.py, host.py, prometheus_query.py) -> `Sample`s (samples.py)
-> store.py (SQLite) -> detectors.py (pure, over series) -> `Alert`s -> view.py (terminal, JSON lines).
prom_rules.py writes the same detectors as Prometheus rules for fleets that run Prometheus.
"""
