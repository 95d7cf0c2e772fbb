"""Load imbalance across data-parallel ranks, one definition for every engine and every command.

With data parallelism each rank owns its own KV pool, so one rank can saturate while the deployment-wide
average looks fine. The imbalance of a quantity over the ranks at one instant is

    imbalance = (max - min) / mean

(0 when every rank carries the same load; 0 too when the mean is 0, since an idle deployment is balanced).
Ranks more than `IMBALANCE_WARN` apart are the early warning. `simulate` computes it per step over the ranks'
KV usage; `watch` computes it per scrape over the engines' KV usage; `rules` writes the same threshold into
the generated Prometheus alert. Nothing here knows which engine produced the numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

IMBALANCE_WARN = 0.15  # ranks more than 15% apart (of their mean): the early warning of one rank saturating
# Below this mean KV usage the ranks are nearly idle and their spread is noise (two requests against one
# read as 67%): the imbalance is not judged there (watch's `imbalance_min_kv` default, the rule's guard).
IMBALANCE_MIN_MEAN_KV = 0.05
# Each rank's usage is averaged over this trailing window before the ranks are compared: an instant's spread
# is mostly which rank happened to admit the last long prompt (watch's window, the rule's avg_over_time).
IMBALANCE_WINDOW_S = 300.0


def imbalance(values: Sequence[float]) -> float:
    """(max - min) / mean over the ranks' values; 0.0 for fewer than two ranks or a zero mean."""
    if len(values) < 2:
        return 0.0
    lo = min(values)
    hi = max(values)
    mean = sum(values) / len(values)
    if mean <= 0:
        return 0.0
    return (hi - lo) / mean


def time_above(
    series: Sequence[float], durations: Sequence[float], threshold: float = IMBALANCE_WARN
) -> float:
    """Total duration of the samples whose imbalance is strictly above `threshold`.

    `series[i]` holds for `durations[i]` (a step's length, or the interval to the next scrape)."""
    if len(series) != len(durations):
        raise ValueError(f"{len(series)} imbalance samples but {len(durations)} durations")
    return sum(d for v, d in zip(series, durations) if v > threshold)


def promql_imbalance(metric: str, selector: str = "", by: str = "") -> str:
    """The same definition as a PromQL expression over the ranks' series of `metric`.

    `by` groups deployments (e.g. "model_name"); the ranks are the series within a group."""
    group = f" by ({by})" if by else ""
    sel = selector or ""
    return (
        f"(max{group}({metric}{sel}) - min{group}({metric}{sel})) "
        f"/ clamp_min(avg{group}({metric}{sel}), 1e-9)"
    )
