"""The planner: vLLM's startup numbers, the fit verdict, and the lines other planners forget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oomguard.engines.vllm.engine import PLANNER as VLLM
from oomguard.errors import ParallelismError, UnknownModelError
from oomguard.ledger import GpuLedger
from oomguard.planning import PlanRequest, plan
from oomguard.planning.advise import fix_ledger
from oomguard.planning.fix_search import search_fixes

GiB = 1 << 30


def llama8b(version: str = "0.19.0", **flags) -> PlanRequest:
    return PlanRequest(
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpu="H100",
        vllm_version=version,
        flags={"max_model_len": 8192, **flags},
    )


def test_budget_is_ceil_of_the_cuda_total_times_utilization() -> None:
    result = plan(llama8b(gpu_memory_utilization=0.9))
    assert result.gpu.total_bytes == 85_029_158_912
    assert result.rank0.budget_bytes == 76_526_243_021  # ceil(0.9 x T), ACCOUNTING.md §10


def test_weights_are_exact_checkpoint_bytes_plus_rope_cache() -> None:
    result = plan(llama8b())
    assert result.rank0.weights.bytes == 16_060_522_496 + 131072 * 128 * 2
    assert result.rank0.weights.kind == "exact"


def test_default_utilization_and_cuda_graph_accounting_change_at_0_21() -> None:
    before, after = plan(llama8b("0.20.0")), plan(llama8b("0.21.0"))
    assert before.engine.gpu_memory_utilization == 0.9 and after.engine.gpu_memory_utilization == 0.92
    graphs = after.rank0.cuda_graphs.bytes
    assert graphs > 0
    assert after.rank0.available_kv_bytes == (
        after.rank0.budget_bytes
        - after.rank0.weights.bytes
        - after.rank0.activation.bytes
        - after.rank0.non_torch.bytes
        - graphs
    )
    assert before.rank0.available_kv_bytes == (
        before.rank0.budget_bytes
        - before.rank0.weights.bytes
        - before.rank0.activation.bytes
        - before.rank0.non_torch.bytes
    )


def test_nccl_buffers_appear_at_tp_2() -> None:
    one = plan(llama8b())
    two = plan(llama8b(tensor_parallel_size=2))
    assert two.rank0.non_torch.bytes - one.rank0.non_torch.bytes > 1.5 * GiB


def test_kv_pool_is_the_minimum_over_pipeline_stages() -> None:
    result = plan(llama8b(pipeline_parallel_size=3))
    assert len(result.ranks) == 3
    own_blocks = [r.available_kv_bytes // r.layout.bytes_per_block for r in result.ranks]
    assert result.kv.num_gpu_blocks == min(own_blocks)
    assert all(r.num_gpu_blocks == min(own_blocks) for r in result.ranks)
    assert result.ranks[0].placement.holds_embedding and result.ranks[-1].placement.holds_lm_head


def test_seventy_b_on_one_h100_does_not_start_and_the_fix_adds_gpus() -> None:
    result = plan(
        PlanRequest(model="meta-llama/Llama-3.1-70B-Instruct", gpu="H100", flags={"max_model_len": 32768})
    )
    assert not result.fits
    # 131 GiB of weights on a 79 GiB device: torch runs out while loading, before any KV sizing.
    assert result.failure == "weights-dont-fit"
    assert result.errors[0].startswith("CUDA out of memory. Tried to allocate")
    fixes = search_fixes(VLLM, result)
    assert fixes and all(f.plan.fits for f in fixes)
    assert any(f.result.flags.get("tensor_parallel_size", 1) > 1 for f in fixes)


def test_too_long_context_gets_vllms_error_and_a_length_that_fits() -> None:
    result = plan(llama8b(gpu_memory_utilization=0.3, max_model_len=131072))
    assert result.failure == "max-model-len"
    assert "estimated maximum model length is" in result.errors[0]
    fixes = search_fixes(VLLM, result)
    by_length = [f for f in fixes if set(f.result.flags) == {"max_model_len"}]
    assert by_length and by_length[0].plan.fits
    assert by_length[0].result.max_model_len < 131072


def test_max_model_len_auto_fits_the_pool() -> None:
    result = plan(llama8b(gpu_memory_utilization=0.3, max_model_len="auto"))
    assert result.fits
    assert 8192 < result.engine.max_model_len < 131072


def test_startup_free_memory_check_counts_other_processes() -> None:
    request = PlanRequest(
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpu="H100",
        flags={"gpu_memory_utilization": 0.95},
        used_by_other_processes=18 * GiB,
    )
    result = plan(request)
    assert result.failure == "startup-free-memory"
    assert "on startup is less than desired GPU memory utilization (0.95" in result.errors[0]


def test_tp_that_does_not_divide_heads_is_refused() -> None:
    with pytest.raises(ParallelismError, match="does not divide"):
        plan(PlanRequest(model="Qwen/Qwen3-14B", gpu="H100", flags={"tensor_parallel_size": 5}))


def test_unknown_model_offline_says_how_to_pass_a_config(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UnknownModelError, match="config.json"):
        plan(PlanRequest(model="nobody/no-such-model-xyz", gpu="H100"))


# --- seed 000: data parallel + expert parallel
# ---------------------------------------------------------------


def test_seed_000_ledger_does_not_fit_with_kv_for_both_replicas() -> None:
    """80 GiB, weights 20, KV 25 per replica, EP peak 12, DP 2 on one GPU: 20 + 2 x 25 + 12 = 82 > 80, where a
    planner that budgets one replica sees 57 and says it fits."""
    ledger = GpuLedger.from_items(
        80 * GiB,
        replicas=2,
        shared=("weights", "comm_buffers"),
        weights=20 * GiB,
        kv_cache=25 * GiB,
        comm_buffers=12 * GiB,
    )
    assert ledger.used_bytes == 82 * GiB and not ledger.fits
    assert ledger.with_replicas(1).fits  # the single-replica planner's (wrong) verdict
    fixes = fix_ledger(ledger)
    assert fixes and all(f.ledger.fits for f in fixes)
    kv_fix = fixes[0]
    assert kv_fix.ledger.bytes_of("kv_cache") < 24 * GiB  # (80 - 2% headroom - 32) / 2


def test_co_located_replicas_each_need_their_own_budget() -> None:
    one = plan(
        PlanRequest(
            model="Qwen/Qwen3-8B", gpu="H100", flags={"max_model_len": 32768, "gpu_memory_utilization": 0.45}
        )
    )
    two = plan(
        PlanRequest(
            model="Qwen/Qwen3-8B",
            gpu="H100",
            replicas_per_gpu=2,
            flags={"max_model_len": 32768, "gpu_memory_utilization": 0.9},
        )
    )
    assert one.fits
    assert not two.fits
    fixes = search_fixes(VLLM, two)
    assert any(f.result.flags.get("gpu_memory_utilization", 1) < 0.5 and f.plan.fits for f in fixes)


def test_deepep_buffers_are_their_own_line_and_shrink_kv() -> None:
    base = {
        "max_model_len": 8192,
        "tensor_parallel_size": 1,
        "data_parallel_size": 8,
        "enable_expert_parallel": True,
        "max_num_batched_tokens": 8192,
    }
    plain = plan(PlanRequest(model="Qwen/Qwen3-30B-A3B", gpu="H100", flags=base))
    deepep = plan(
        PlanRequest(
            model="Qwen/Qwen3-30B-A3B", gpu="H100", flags={**base, "all2all_backend": "deepep_low_latency"}
        )
    )
    assert plain.rank0.comm_buffers.bytes == 0
    assert deepep.rank0.comm_buffers.bytes > 1 * GiB
    assert deepep.rank0.available_kv_bytes < plain.rank0.available_kv_bytes


def test_deepep_low_latency_with_dp_defaults_to_256_batched_tokens() -> None:
    flags = {
        "max_model_len": 8192,
        "data_parallel_size": 8,
        "enable_expert_parallel": True,
        "all2all_backend": "deepep_low_latency",
    }
    result = plan(PlanRequest(model="Qwen/Qwen3-30B-A3B", gpu="H100", flags=flags))
    assert result.engine.max_num_batched_tokens == 256


# --- accuracy against real runs (the bench prints the full table)
# --------------------------------------------


def test_available_kv_within_three_percent_of_budget_on_the_llmd_sweep(shared_data: Path) -> None:
    rows = [
        json.loads(line)
        for line in (shared_data / "validation" / "vllm_startup_dev.jsonl").read_text().splitlines()
    ]
    checked = 0
    for row in rows:
        if not row["id"].startswith("llmd:planner-pr205/v0.19.0/") or row["status"] != "ok":
            continue
        if row["measured"]["kv_cache_gib"] is None:
            continue
        flags = {
            "tensor_parallel_size": row["tp"],
            "pipeline_parallel_size": row["pp"],
            "gpu_memory_utilization": row["gpu_memory_utilization"],
            "max_model_len": row["max_model_len"],
        }
        try:
            result = plan(PlanRequest(model=row["model"], gpu="H100", flags=flags, vllm_version="0.19.0"))
        except UnknownModelError:
            continue
        if result.model.quantization is None and row["quantization"]:
            continue  # the catalog copy lacks its quantization_config (a data gap, not a formula)
        error = abs(result.rank0.available_kv_bytes / GiB - row["measured"]["kv_cache_gib"])
        assert error <= 0.03 * result.rank0.budget_bytes / GiB, row["id"]
        checked += 1
    assert checked >= 10


def test_eagle_drafter_adds_a_kv_layer_and_its_weights() -> None:
    plain = plan(llama8b("0.33.0"))
    eagle = plan(llama8b("0.33.0", speculative_config={"method": "eagle3", "num_speculative_tokens": 3}))
    assert eagle.kv.layout.num_layers == plain.kv.layout.num_layers + 1  # 33 layers share the pool
    assert eagle.rank0.weights.bytes > plain.rank0.weights.bytes
    assert eagle.rank0.weights.kind == "estimated"


def test_mtp_loads_the_checkpoints_mtp_layer() -> None:
    flags = {"tensor_parallel_size": 8, "max_model_len": 32768}
    base = plan(PlanRequest(model="deepseek-ai/DeepSeek-V3", gpu="H200", flags=flags))
    mtp = plan(
        PlanRequest(
            model="deepseek-ai/DeepSeek-V3",
            gpu="H200",
            flags={**flags, "speculative_config": {"method": "deepseek_mtp", "num_speculative_tokens": 1}},
        )
    )
    assert mtp.rank0.weights.bytes > base.rank0.weights.bytes
    assert mtp.kv.layout.num_layers == base.kv.layout.num_layers + 1


def test_calibrate_replaces_estimates_with_an_earlier_runs_figures(tmp_path) -> None:
    from oomguard.planning.calibrate import measured_terms_from_log

    log = tmp_path / "server.log"
    log.write_text(
        "(EngineCore_DP0 pid=1) INFO 04-17 10:00:01 [gpu_model_runner.py:2000] Model loading took 14.99 GiB "
        "memory "
        "and 5.1 seconds\n"
        "(EngineCore_DP0 pid=1) DEBUG 04-17 10:00:09 [gpu_worker.py:300] Memory profiling takes 3.1 seconds. "
        "Total "
        "non KV cache memory: 17.12GiB; torch peak memory increase: 1.88GiB; non-torch forward increase "
        "memory: "
        "0.25GiB; weights memory: 14.99GiB.\n"
    )
    measured = measured_terms_from_log(str(log))
    result = plan(
        PlanRequest(
            model="meta-llama/Llama-3.1-8B-Instruct",
            gpu="H100",
            vllm_version="0.19.0",
            flags={"max_model_len": 8192},
            measured=measured,
        )
    )
    assert result.rank0.activation.bytes == int(1.88 * GiB)
    assert result.rank0.activation.kind == "measured"
