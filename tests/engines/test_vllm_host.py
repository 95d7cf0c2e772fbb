"""vLLM's host memory on one node: processes, loading by checkpoint format, host buffers, /dev/shm and fixes.

Checkpoints are real directories (safetensors shards written by the safetensors library, .bin shards of real
sizes); engine settings come from real `vllm serve` commands through the planner.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from oomguard.engines.vllm.host import (
    GPU_WORKER_RSS,
    MQ_RESPONSE_CHUNK_BYTES,
    RUNAI_DEFAULT_MEMORY_LIMIT,
    host_ledger,
    plan_host_inputs,
)
from oomguard.engines.vllm.plan import Plan, PlanRequest, plan
from oomguard.host.ledger import HostLedger, HostLimits, HostStep, HostVerdict, ShmSize
from oomguard.host.limits import RUNTIME_DEFAULT_SHM_BYTES
from oomguard.models.checkpoint_files import (
    CheckpointFiles,
    WeightFormat,
    assumed_checkpoint_files,
    read_checkpoint_files,
)
from oomguard.units import GiB, MiB


def _plan(command: str, version: str = "0.33.0") -> Plan:
    return plan(PlanRequest.from_argv(command, gpu="H100", vllm_version=version))


def _ledger(
    command: str,
    *,
    limit_gib: float | None = None,
    files: CheckpointFiles | None = None,
    version: str = "0.33.0",
    local_gpus: int | None = None,
    shm: ShmSize | None = None,
) -> HostLedger:
    result = _plan(command, version)
    stages: dict[int, int] = {}
    for rank in result.ranks:
        stages[rank.placement.pp_rank] = max(stages.get(rank.placement.pp_rank, 0), rank.weights.bytes)
    limits = HostLimits(None if limit_gib is None else int(limit_gib * GiB), None, shm)
    inputs = plan_host_inputs(
        result.engine,
        result.model,
        limits,
        stage_weights=[stages[k] for k in sorted(stages)],
        local_gpus=local_gpus,
    )
    if files is not None:
        inputs = replace(inputs, files=files)
    cfg = result.engine
    return host_ledger(cfg, inputs)


def _roles(ledger: HostLedger) -> dict[str, int]:
    return {p.role: p.count for p in ledger.processes}


def _line(ledger: HostLedger, key: str) -> tuple[int, int]:
    line = next(item for item in ledger.lines if item.key == key)
    return line.bytes_each, line.count


# --- processes ----------------------------------------------------------------------------------------------


def test_single_gpu_runs_the_worker_inside_the_engine_core() -> None:
    ledger = _ledger("vllm serve Qwen/Qwen3-8B")
    assert _roles(ledger) == {"API server": 1, "engine core": 1}
    assert not any(line.shm for line in ledger.lines)  # no executor queues: a 64 MiB /dev/shm is enough


def test_tensor_parallel_starts_one_worker_per_gpu() -> None:
    ledger = _ledger("vllm serve meta-llama/Llama-3.1-70B-Instruct -tp 4")
    assert _roles(ledger) == {"API server": 1, "engine core": 1, "GPU worker": 4}
    assert _line(ledger, "worker_rss") == (GPU_WORKER_RSS[0], 4)


def test_v0_runs_the_driver_worker_in_the_engine_process() -> None:
    ledger = _ledger("vllm serve Qwen/Qwen2.5-7B-Instruct -tp 2", version="0.6.6")
    assert _roles(ledger) == {"API server": 1, "engine core": 1, "GPU worker": 1}
    assert not any(line.key == "shm_responses" for line in ledger.lines)  # V1's executor queues only
    assert _line(ledger, "swap_space") == (4 * GiB, 2)  # both GPU processes pin their swap space


def test_data_parallel_defaults_to_one_api_server_per_rank_and_a_coordinator() -> None:
    ledger = _ledger("vllm serve Qwen/Qwen3-8B -dp 2 -tp 2")
    assert _roles(ledger) == {
        "API server": 2,
        "launcher": 1,
        "DP coordinator": 1,
        "engine core": 2,
        "GPU worker": 4,
    }
    explicit = _ledger("vllm serve Qwen/Qwen3-8B -dp 2 -tp 2 --api-server-count 1")
    assert _roles(explicit)["API server"] == 1 and "launcher" not in _roles(explicit)


def test_headless_nodes_run_no_api_server() -> None:
    assert "API server" not in _roles(_ledger("vllm serve Qwen/Qwen3-8B -dp 4 --headless"))


def test_ray_backend_adds_rays_services() -> None:
    ledger = _ledger("vllm serve Qwen/Qwen3-32B -tp 2 --distributed-executor-backend ray")
    assert _roles(ledger)["Ray services"] == 1
    assert any("object store" in note for note in ledger.notes)


def test_a_node_with_half_the_gpus_of_a_tp_pp_engine_runs_the_first_stage() -> None:
    command = "vllm serve meta-llama/Llama-3.1-70B-Instruct -tp 8 -pp 2 --enable-sleep-mode"
    ledger = _ledger(command, local_gpus=8)
    assert _roles(ledger)["GPU worker"] == 8
    first_stage = next(r for r in _plan(command).ranks if r.placement.pp_rank == 0)
    assert _line(ledger, "sleep_backup") == (first_stage.weights.bytes, 8)


# --- loading ------------------------------------------------------------------------------------------------


def _bin_checkpoint(directory: Path, shard_gib: tuple[float, ...]) -> Path:
    directory.mkdir()
    for i, size in enumerate(shard_gib):
        with open(directory / f"pytorch_model-{i + 1:05d}-of-{len(shard_gib):05d}.bin", "wb") as f:
            f.truncate(int(size * GiB))  # the size is what counts: each worker unpickles the whole shard
    return directory


def test_bin_shards_are_read_whole_by_every_worker_at_once(tmp_path: Path) -> None:
    files = read_checkpoint_files(_bin_checkpoint(tmp_path / "m", (9.8, 9.8, 4.1)))
    assert files is not None and files.format is WeightFormat.PYTORCH_BIN and files.exact
    ledger = _ledger("vllm serve meta-llama/Llama-3.1-70B-Instruct -tp 4", files=files)
    assert _line(ledger, "load_peak") == (int(9.8 * GiB), 4)
    assert ledger.load_workers_at_once == 4
    assert ledger.peak_step is HostStep.LOAD


def test_safetensors_are_mapped_and_their_page_cache_is_never_summed(tmp_path: Path) -> None:
    directory = tmp_path / "m"
    directory.mkdir()
    save_file({"a": np.zeros((1024, 1024), np.float32)}, str(directory / "model-00001-of-00002.safetensors"))
    save_file({"b": np.zeros((512, 1024), np.float32)}, str(directory / "model-00002-of-00002.safetensors"))
    save_file({"a": np.zeros((1024, 1024), np.float32)}, str(directory / "consolidated.safetensors"))
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    files = read_checkpoint_files(directory)
    assert files is not None and files.format is WeightFormat.SAFETENSORS and files.num_shards == 2
    ledger = _ledger("vllm serve meta-llama/Llama-3.1-70B-Instruct -tp 4", files=files)
    page_cache = next(line for line in ledger.lines if line.key == "page_cache")
    assert page_cache.reclaimable and page_cache.bytes == files.total_bytes
    assert ledger.used_at(HostStep.LOAD) < ledger.used_at(HostStep.STARTUP) + 4 * 3 * GiB


def test_safetensors_come_before_bin_files_as_vllm_picks_them(tmp_path: Path) -> None:
    directory = _bin_checkpoint(tmp_path / "m", (1.0,))
    save_file({"a": np.zeros((8, 8), np.float32)}, str(directory / "model.safetensors"))
    found = read_checkpoint_files(directory)
    assert found is not None and found.format is WeightFormat.SAFETENSORS
    pt_only = read_checkpoint_files(directory, "pt")
    assert pt_only is None


def test_eager_safetensors_hold_a_shard_twice() -> None:
    files = assumed_checkpoint_files(20 * 10**9)
    ledger = _ledger("vllm serve Qwen/Qwen3-8B -tp 2 --safetensors-load-strategy eager", files=files)
    assert _line(ledger, "load_peak") == (2 * files.largest_shard_bytes, 2)


def test_multithread_loading_holds_num_threads_shards() -> None:
    files = assumed_checkpoint_files(100 * 10**9)
    extra = '\'{"enable_multithread_load": true, "num_threads": 4}\''
    ledger = _ledger(f"vllm serve Qwen/Qwen3-8B -tp 2 --model-loader-extra-config {extra}", files=files)
    assert _line(ledger, "load_peak") == (4 * files.largest_shard_bytes, 2)


def test_runai_streamer_buffers_up_to_its_memory_limit_per_worker() -> None:
    files = assumed_checkpoint_files(218 * 10**9)
    ledger = _ledger(
        "vllm serve meta-llama/Llama-4-Scout-17B-16E-Instruct -tp 4 --load-format runai_streamer", files=files
    )
    each, count = _line(ledger, "load_peak")
    assert count == 4 and RUNAI_DEFAULT_MEMORY_LIMIT <= each < RUNAI_DEFAULT_MEMORY_LIMIT + 4 * GiB
    unlimited = _ledger(
        "RUNAI_STREAMER_MEMORY_LIMIT=-1 vllm serve meta-llama/Llama-4-Scout-17B-16E-Instruct -tp 4 "
        "--load-format runai_streamer",
        files=files,
    )
    assert _line(unlimited, "load_peak")[0] >= files.total_bytes


def test_max_parallel_loading_workers_only_limits_v0_ray() -> None:
    files = assumed_checkpoint_files(140 * 10**9, WeightFormat.PYTORCH_BIN)
    v1 = _ledger(
        "vllm serve meta-llama/Llama-3.1-70B-Instruct -tp 4 --max-parallel-loading-workers 1", files=files
    )
    assert v1.load_workers_at_once == 4 and any("ignored" in note for note in v1.notes)
    v0 = _ledger(
        "vllm serve meta-llama/Llama-3.1-70B-Instruct -tp 4 --max-parallel-loading-workers 1 "
        "--distributed-executor-backend ray",
        files=files,
        version="0.6.6",
    )
    assert v0.load_workers_at_once == 1


# --- host buffers -------------------------------------------------------------------------------------------


def test_token_id_buffer_follows_the_model_runner() -> None:
    command = "vllm serve Qwen/Qwen3-8B -tp 2 --max-num-seqs 256 --max-model-len 32768"
    assert _line(_ledger(command), "token_buffer") == (256 * 32768 * 4, 2)  # V2 runner: int32, pinned
    assert _line(_ledger(command, version="0.25.0"), "token_buffer") == (256 * 32768 * 5, 2)  # + bool mask


def test_cpu_offload_is_per_gpu_and_held_from_loading_on() -> None:
    ledger = _ledger("vllm serve meta-llama/Llama-3.1-70B-Instruct -tp 2 --cpu-offload-gb 10")
    assert _line(ledger, "cpu_offload") == (10 * GiB, 2)
    assert ledger.used_at(HostStep.INIT) >= 20 * GiB


def test_v0_swap_space_defaults_to_4_gib_per_worker_and_v1_has_none() -> None:
    assert _line(_ledger("vllm serve Qwen/Qwen3-8B -tp 2", version="0.7.3"), "swap_space") == (4 * GiB, 2)
    assert not any(line.key == "swap_space" for line in _ledger("vllm serve Qwen/Qwen3-8B -tp 2").lines)


def test_kv_offloading_is_one_shm_region_per_engine() -> None:
    ledger = _ledger("vllm serve Qwen/Qwen3-8B -tp 2 --kv-offloading-size 64")
    line = next(item for item in ledger.lines if item.key == "kv_offload")
    assert line.shm and line.bytes == 64 * GiB and line.count == 1


def test_multimodal_cache_is_copied_per_api_server_and_engine_core() -> None:
    ledger = _ledger("vllm serve google/gemma-3-12b-it")
    assert _line(ledger, "mm_cache") == (4 * GiB, 2)  # one API server + one engine core
    several = _ledger("vllm serve google/gemma-3-12b-it --api-server-count 4")
    assert _line(several, "mm_cache") == (4 * GiB, 4)  # processor-only caches, one per API server
    shared = _ledger("vllm serve google/gemma-3-12b-it --mm-processor-cache-type shm")
    assert _line(shared, "mm_cache") == (4 * GiB, 1)
    text_only = _ledger("vllm serve Qwen/Qwen3-8B")
    assert not any(line.key == "mm_cache" for line in text_only.lines)


def test_sleep_mode_copies_each_workers_weights_to_host_memory() -> None:
    result = _plan("vllm serve meta-llama/Llama-3.1-70B-Instruct -tp 4")
    ledger = _ledger("vllm serve meta-llama/Llama-3.1-70B-Instruct -tp 4 --enable-sleep-mode")
    each, count = _line(ledger, "sleep_backup")
    assert count == 4 and each == result.rank0.weights.bytes
    assert ledger.peak_step is HostStep.SLEEP


# --- /dev/shm and verdicts ----------------------------------------------------------------------------------


def test_tensor_parallel_needs_more_shm_than_the_runtime_default() -> None:
    ledger = _ledger("vllm serve Qwen/Qwen3-32B -tp 2", shm=ShmSize(RUNTIME_DEFAULT_SHM_BYTES, "runtime"))
    assert ledger.shm_needed >= 2 * 10 * MQ_RESPONSE_CHUNK_BYTES
    assert ledger.shm_fits is False and not ledger.fits
    roomy = _ledger("vllm serve Qwen/Qwen3-32B -tp 2", shm=ShmSize(2 * GiB, "emptyDir"))
    assert roomy.shm_fits is True
    assert _ledger("vllm serve Qwen/Qwen3-8B", shm=ShmSize(64 * MiB, "runtime")).shm_fits is True


def test_bin_checkpoint_over_the_limit_dies_at_load_with_fixes() -> None:
    files = assumed_checkpoint_files(140 * 10**9, WeightFormat.PYTORCH_BIN)
    ledger = _ledger("vllm serve meta-llama/Llama-3.1-70B-Instruct -tp 4", files=files, limit_gib=32)
    assert ledger.verdict is HostVerdict.OOM_KILLED and ledger.dies_at is HostStep.LOAD
    summaries = [fix.summary for fix in ledger.fixes]
    assert summaries[0].startswith("raise the memory limit to ")
    assert any("safetensors" in s for s in summaries)


@pytest.mark.parametrize("limit_gib", [10.0, 12.0])
def test_the_mm_cache_fix_is_sized_to_fit(limit_gib: float) -> None:
    ledger = _ledger("vllm serve google/gemma-3-12b-it", limit_gib=limit_gib)
    assert ledger.dies_at is HostStep.SERVING
    fix = next(f for f in ledger.fixes if f.summary.startswith("--mm-processor-cache-gb"))
    fixed = _ledger(f"vllm serve google/gemma-3-12b-it {fix.summary}", limit_gib=limit_gib)
    assert fixed.verdict is not HostVerdict.OOM_KILLED


def test_distributed_runai_streaming_buffers_each_ranks_share() -> None:
    files = assumed_checkpoint_files(160 * 10**9)
    extra = "'{\"distributed\": true}'"
    ledger = _ledger(
        f"vllm serve meta-llama/Llama-3.3-70B-Instruct -tp 4 --load-format runai_streamer "
        f"--model-loader-extra-config {extra}",
        files=files,
    )
    each, count = _line(ledger, "load_peak")
    assert count == 4 and files.total_bytes // 4 <= each < files.total_bytes // 4 + 4 * GiB
