"""The one imbalance definition shared by simulate, watch and rules."""

from __future__ import annotations

import pytest

from oomguard.imbalance import IMBALANCE_WARN, imbalance, promql_imbalance, time_above


def test_equal_ranks_are_balanced() -> None:
    assert imbalance([0.5, 0.5, 0.5, 0.5]) == 0.0


def test_spread_over_mean() -> None:
    # mean 0.5, max 0.7, min 0.3 -> 0.8
    assert imbalance([0.3, 0.5, 0.5, 0.7]) == pytest.approx(0.8)


def test_idle_deployment_and_single_rank_are_balanced() -> None:
    assert imbalance([0.0, 0.0]) == 0.0
    assert imbalance([0.9]) == 0.0
    assert imbalance([]) == 0.0


def test_time_above_counts_only_samples_past_the_threshold() -> None:
    series = [0.10, IMBALANCE_WARN, 0.20, 0.50]
    assert time_above(series, [1.0, 2.0, 3.0, 4.0]) == pytest.approx(7.0)


def test_time_above_rejects_mismatched_lengths() -> None:
    with pytest.raises(ValueError):
        time_above([0.1], [1.0, 2.0])


def test_promql_has_the_same_shape() -> None:
    expr = promql_imbalance("vllm:kv_cache_usage_perc", '{job="vllm"}', by="model_name")
    assert expr.startswith('(max by (model_name)(vllm:kv_cache_usage_perc{job="vllm"})')
    assert "clamp_min(avg by (model_name)" in expr
