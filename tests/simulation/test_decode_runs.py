"""Runs of identical decode steps are advanced together; the timeline must be the step-by-step one."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from oomguard.simulation.kv_pool import KvGroupSpec
from oomguard.simulation.run import SimulationConfig, SimulationResult, simulate
from oomguard.simulation.scheduler import SchedulerConfig
from oomguard.simulation.step_memory import ActivationModel, ModelWidths
from oomguard.simulation.step_time import StepTimeModel
from oomguard.simulation.workload import read_workload, scale_rate, window


def _both(
    config: SimulationConfig, workload_path: Path, start: float, end: float, rate: float = 1.0
) -> tuple[SimulationResult, SimulationResult]:
    workload = window(read_workload(workload_path), start, end)
    if rate != 1.0:
        workload = scale_rate(workload, rate)
    together = simulate(workload, config)
    one_by_one = simulate(workload, replace(config, fast_forward=False))
    return together, one_by_one


def _config(blocks: int, prefix_caching: bool) -> SimulationConfig:
    sched = SchedulerConfig(
        2048, 64, 32768, blocks, (KvGroupSpec("full", 16),), enable_prefix_caching=prefix_caching
    )
    return SimulationConfig(
        sched,
        activation=ActivationModel.from_widths(ModelWidths(4096, 2, 14336, 128256)),
        step_time=StepTimeModel.from_coefficients("8,0.05,0.01"),
        record_chunks=True,
    )


def test_mooncake_with_prefix_caching_and_preemptions_gives_the_same_timeline(shared_data: Path) -> None:
    path = shared_data / "traces/mooncake_fast25/conversation_trace.jsonl"
    together, one_by_one = _both(_config(2100, True), path, 0, 90)
    assert together.preemptions > 0  # the pool is tight: preemptions fall inside decode runs too
    assert together.timeline == one_by_one.timeline
    assert together.requests == one_by_one.requests
    assert together.peak_step == one_by_one.peak_step


def test_azure_without_prefix_caching_gives_the_same_timeline(shared_data: Path) -> None:
    path = shared_data / "traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv"
    together, one_by_one = _both(_config(1100, False), path, 0, 120, rate=2.0)
    assert together.preemptions > 0
    assert together.timeline == one_by_one.timeline
    assert together.requests == one_by_one.requests


def test_max_steps_stops_inside_a_decode_run_at_exactly_that_step(shared_data: Path) -> None:
    path = shared_data / "traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv"
    config = replace(_config(1100, False), max_steps=777)
    together, one_by_one = _both(config, path, 0, 120)
    assert len(together.timeline) == 777
    assert together.timeline == one_by_one.timeline


def test_a_saturated_pool_preempts_decoding_requests_as_step_by_step_does(shared_data: Path) -> None:
    # Prefix caching on, arrivals 8x faster than the trace: the decoding requests' own new blocks run out, so
    # their step preempts from the back of the running list, decoding requests included.
    path = shared_data / "traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv"
    together, one_by_one = _both(_config(1100, True), path, 0, 60, rate=8.0)
    assert together.preemptions > 20
    assert together.timeline == one_by_one.timeline
    assert together.requests == one_by_one.requests
    assert together.peak_step == one_by_one.peak_step


def test_decode_runs_go_through_finishes_with_the_same_timeline_and_finish_times(shared_data: Path) -> None:
    # Half load, no waiting queue most of the time: the runs carry on through the steps where members finish
    # (their blocks return to the pool mid-run), and the finish step's row and the finish times are exact.
    path = shared_data / "traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv"
    together, one_by_one = _both(_config(4000, True), path, 0, 300, rate=0.5)
    assert sum(together.timeline.finished) > 20
    assert together.timeline == one_by_one.timeline
    assert together.requests == one_by_one.requests  # latencies: finish times to the step
