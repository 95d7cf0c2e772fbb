"""vLLM metric names, old and new, become one canonical sample per engine."""

from __future__ import annotations

from oomguard.watch.metrics import vllm_samples
from oomguard.watch.prom_text import parse

from .exporter import EngineState, ServerState, render, steady


def _values(state: ServerState) -> dict[tuple[str, str], float]:
    scraped = vllm_samples(parse(render(state)), "t", 100.0)
    return {(s.engine, s.metric): s.value for s in scraped.samples}


def test_new_kv_usage_name_is_read_as_the_kv_fraction() -> None:
    state = ServerState(engines={"0": EngineState(kv_usage=0.625)})
    assert _values(state)[("0", "kv_cache_usage")] == 0.625


def test_old_gpu_cache_usage_name_is_read_when_alone() -> None:
    state = ServerState(engines={"0": EngineState(kv_usage=0.5)}, only_old_names=True)
    assert _values(state)[("0", "kv_cache_usage")] == 0.5


def test_when_both_names_are_served_the_value_is_counted_once() -> None:
    state = ServerState(engines={"0": EngineState(kv_usage=0.5)}, old_names=True)
    scraped = vllm_samples(parse(render(state)), "t", 1.0)
    assert [s.value for s in scraped.samples if s.metric == "kv_cache_usage"] == [0.5]


def test_each_data_parallel_engine_gets_its_own_series() -> None:
    state = ServerState(
        engines={"0": EngineState(kv_usage=0.2, waiting=1), "1": EngineState(kv_usage=0.7, waiting=9)}
    )
    values = _values(state)
    assert (values[("0", "kv_cache_usage")], values[("1", "kv_cache_usage")]) == (0.2, 0.7)
    assert (values[("0", "requests_waiting")], values[("1", "requests_waiting")]) == (1, 9)


def test_cache_config_info_labels_give_the_kv_pool() -> None:
    values = _values(ServerState(num_gpu_blocks=27_288, block_size=16, gpu_memory_utilization=0.9))
    assert values[("0", "kv_num_gpu_blocks")] == 27_288
    assert values[("0", "kv_block_size")] == 16
    assert values[("0", "gpu_memory_utilization")] == 0.9


def test_num_gpu_blocks_none_before_sizing_is_left_out() -> None:
    values = _values(ServerState(num_gpu_blocks=None))
    assert ("0", "kv_num_gpu_blocks") not in values and ("0", "kv_block_size") in values


def test_finished_requests_sum_all_reasons() -> None:
    state = ServerState(engines={"0": EngineState(finished_stop=30, finished_length=12)})
    assert _values(state)[("0", "requests_finished")] == 42


def test_counters_are_read_from_their_total_series_not_created() -> None:
    values = _values(steady(10))
    assert values[("0", "prompt_tokens")] == 50_000 and values[("0", "generation_tokens")] == 4_000


def test_model_name_and_process_metrics_are_kept() -> None:
    scraped = vllm_samples(parse(render(ServerState(rss_bytes=3e9, process_start=1.7e9))), "t", 1.0)
    assert scraped.models == {"0": "meta-llama/Llama-3.1-8B-Instruct"}
    values = {s.metric: s.value for s in scraped.samples if s.engine == ""}
    assert values == {"process_rss_bytes": 3e9, "process_start_time": 1.7e9}


def test_a_body_without_vllm_metrics_is_recognised() -> None:
    scraped = vllm_samples(parse("# TYPE up gauge\nup 1\n"), "t", 1.0)
    assert not scraped.vllm_found and scraped.samples == ()
