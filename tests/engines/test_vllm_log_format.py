"""Each vLLM startup line is written and read by one pair in engines/vllm/log_format.py: every line a plan
predicts, in every version's format, is read back by its pattern with the number the plan holds; and diagnose
and `plan --calibrate` read real logs with those same patterns."""

from __future__ import annotations

import re

import pytest

from oomguard.diagnosis.sources import vllm_log
from oomguard.engines.vllm import log_format
from oomguard.engines.vllm.plan import PlanRequest, plan
from oomguard.planning import calibrate
from oomguard.units import GiB

# V0 (blocks line), V1 with two capacity lines and "%.2f" GiB, "round" GiB, CUDA graphs in the budget
# (v0.21), the one-line capacity (v0.23), and the newest.
VERSIONS = ("0.7.3", "0.9.2", "0.14.0", "0.21.0", "0.23.0", "0.33.0")


def _number(text: str) -> float:
    return float(text.replace(",", "").replace(" ", ""))


@pytest.mark.parametrize("version", VERSIONS)
def test_every_predicted_line_reads_back_with_the_plans_numbers(version: str) -> None:
    result = plan(PlanRequest(model="Qwen/Qwen3-8B", gpu="H100", vllm_version=version))
    lines = log_format.startup_lines(
        result.engine,
        weights=result.rank0.weights.bytes,
        available_kv=result.rank0.available_kv_bytes,
        num_blocks=result.kv.num_gpu_blocks,
        kv_tokens=result.kv.kv_cache_tokens,
        max_concurrency=result.kv.max_concurrency,
        cuda_graphs=result.rank0.cuda_graphs.bytes,
        total_bytes=result.gpu.total_bytes,
    )
    read: dict[re.Pattern[str], re.Match[str]] = {}
    for line in lines:
        matches = {p: m for p in log_format.READERS if (m := p.search(line))}
        assert matches, f"no pattern reads {line!r}"
        read.update(matches)
    weights = read[log_format.WEIGHTS]
    assert _number(weights["v"]) * GiB == pytest.approx(result.rank0.weights.bytes, rel=1e-3)
    if result.engine.behaviour.engine == "v0":
        assert int(read[log_format.BLOCKS]["v"]) == result.kv.num_gpu_blocks
        return
    assert _number(read[log_format.KV_TOKENS]["v"]) == result.kv.kv_cache_tokens
    concurrency = read[log_format.CONCURRENCY]
    assert _number(concurrency["len"]) == result.engine.max_model_len
    assert _number(concurrency["x"]) == pytest.approx(result.kv.max_concurrency, abs=0.005)
    available = _number(read[log_format.KV_AVAILABLE]["v"]) * GiB
    assert available == pytest.approx(result.rank0.available_kv_bytes, abs=0.01 * GiB)
    if result.engine.behaviour.cuda_graphs_in_budget:
        graphs = _number(read[log_format.CUDA_GRAPH_ESTIMATE]["v"]) * GiB
        assert graphs == pytest.approx(result.rank0.cuda_graphs.bytes, abs=0.01 * GiB)
        utilization = _number(read[log_format.UTILIZATION_EQUIVALENT]["u"])
        assert utilization == pytest.approx(result.engine.gpu_memory_utilization, abs=1e-4)


def test_the_readers_are_the_ones_diagnose_and_calibrate_use() -> None:
    assert vllm_log._WEIGHTS is log_format.WEIGHTS
    assert vllm_log._KV_AVAIL is log_format.KV_AVAILABLE
    assert vllm_log._KV_TOKENS is log_format.KV_TOKENS
    assert vllm_log._CONCURRENCY is log_format.CONCURRENCY
    assert vllm_log._CG_EST is log_format.CUDA_GRAPH_ESTIMATE
    assert calibrate.PATTERNS["weights"] is log_format.WEIGHTS
    assert calibrate.PATTERNS["cuda_graph"] is log_format.CUDA_GRAPH_ESTIMATE


def test_a_real_log_line_of_other_devices_and_old_versions_is_read() -> None:
    assert log_format.KV_TOKENS.search("XPU KV cache size: 1,234 tokens")
    weights = log_format.WEIGHTS.search("Loading model weights took 14.9916 GB")
    assert weights is not None and weights["v"] == "14.9916"
    assert log_format.BLOCKS.search("# CUDA blocks: 2048, # CPU blocks: 512")
