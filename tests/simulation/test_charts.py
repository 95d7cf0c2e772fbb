"""The HTML charts' arithmetic: time slices keep every spike, series are drawn as steps."""

from __future__ import annotations

import re

from oomguard.simulation.chart import nice_top, step_path
from oomguard.simulation.fix_search import StepFlag, ladder
from oomguard.simulation.html_report import slice_timeline
from oomguard.simulation.parallel import parallel_map
from oomguard.simulation.run import Timeline


def _timeline(durations: list[float], peaks: list[int]) -> Timeline:
    n = len(durations)
    times = [sum(durations[:i]) for i in range(n)]
    zeros = (0,) * n
    return Timeline(
        step=tuple(range(n)),
        time=tuple(times),
        duration=tuple(durations),
        tokens=zeros,
        num_prefills=zeros,
        num_decodes=zeros,
        max_prefill=zeros,
        running=zeros,
        waiting=zeros,
        kv_blocks_used=zeros,
        preempted=zeros,
        admitted=zeros,
        finished=zeros,
        peak_bytes=tuple(peaks),
    )


def test_a_one_step_spike_among_a_hundred_thousand_steps_survives_slicing() -> None:
    n = 100_000
    peaks = [1 << 30] * n
    peaks[54_321] = 20 << 30
    slices = slice_timeline(_timeline([0.01] * n, peaks), usable_blocks=100, buckets=1800)
    assert max(slices.peak_gib) == 20.0
    spike = [k for k, v in enumerate(slices.peak_gib) if v == 20.0]
    # One 10 ms step of a 1,000 s run lies in one slice (or two, on a boundary), not in a sloped ramp.
    assert 1 <= len(spike) <= 2
    assert slices.peak_step[spike[0]] == 54_321


def test_a_long_step_spans_the_slices_it_lasts() -> None:
    # Step 0 lasts 3 s of a 4 s run: its peak holds for three quarters of the slices, no longer.
    slices = slice_timeline(_timeline([3.0, 0.5, 0.5], [16 << 30, 1 << 30, 1 << 30]), 100, buckets=400)
    high = sum(1 for v in slices.peak_gib if v == 16.0)
    assert high == 300


def test_the_path_has_only_horizontal_runs_and_vertical_jumps() -> None:
    d = step_path([1.0, 1.0, 5.0, 2.0], x0=0.0, width=1.0, span=4.0, top=5.0)
    commands = re.findall(r"[A-Z]", d)
    assert commands == ["M", "H", "V", "H", "V", "H"]


def test_axis_tops_are_round() -> None:
    assert [nice_top(v) for v in (0.7, 1.0, 3.2, 17.0, 99.0, 101.0)] == [1.0, 1.0, 5.0, 20.0, 100.0, 200.0]


def test_fix_ladders_halve_below_the_value_in_force() -> None:
    assert ladder(StepFlag.MAX_NUM_BATCHED_TOKENS, 32768, 163840) == (16384, 8192, 4096, 2048, 1024, 512)
    assert ladder(StepFlag.MAX_NUM_SEQS, 64, 8192) == (32, 16, 8)
    # A threshold is never above max_model_len.
    assert ladder(StepFlag.LONG_PREFILL_TOKEN_THRESHOLD, 32768, 4096)[0] == 2048


def test_parallel_map_keeps_order_and_results() -> None:
    items = list(range(7))
    assert parallel_map(lambda x: x * x, items, workers=2) == [x * x for x in items]
