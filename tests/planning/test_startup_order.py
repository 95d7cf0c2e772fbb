"""Issue 11 point 3: the failure vLLM really meets, in its startup order (free-memory check, load_model,
profile, KV sizing, KV allocation, graph capture, sampler warm-up), and honest provenance of the device
total."""

from __future__ import annotations

import json
from pathlib import Path

from tests.run_oomguard import oomguard

MIXTRAL_EP = [
    "VLLM_DEEPEP_BUFFER_SIZE_MB=12288",
    "vllm",
    "serve",
    "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "-tp",
    "2",
    "-dp",
    "2",
    "--enable-expert-parallel",
    "--all2all-backend",
    "deepep_high_throughput",
    "--max-model-len",
    "32768",
]


def test_weights_larger_than_the_gpu_fail_in_load_model_with_torchs_message() -> None:
    done = oomguard(
        "plan", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "L4", "--max-model-len", "8192", "--json"
    )
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["failure"] == "weights-dont-fit"
    assert data["errors"][0].startswith("CUDA out of memory. Tried to allocate")
    assert "GPU 0 has a total capacity of 22.49 GiB" in data["errors"][0]
    assert "No available memory for the cache blocks" not in done.stdout


def test_weights_that_fit_the_device_but_not_the_budget_still_fail_at_kv_sizing() -> None:
    # Qwen3-8B (15.3 GiB) on a 22.5 GiB L4 at u=0.6 (13.5 GiB budget): loads, then has no KV memory.
    done = oomguard("plan", "Qwen/Qwen3-8B", "--gpu", "L4", "--gpu-memory-utilization", "0.6", "--json")
    data = json.loads(done.stdout)
    assert data["failure"] == "no-kv-memory", data["errors"]


def test_other_processes_count_against_the_weights_too() -> None:
    # 15.3 GiB of weights fit an empty 22.5 GiB L4; with --kv-cache-memory-bytes the budget check is skipped,
    # and 10 GiB held by another process leaves too little to load.
    done = oomguard(
        "plan",
        "Qwen/Qwen3-8B",
        "--gpu",
        "L4",
        "--other-processes",
        "10GiB",
        "--kv-cache-memory-bytes",
        "2GiB",
        "--json",
    )
    data = json.loads(done.stdout)
    assert data["failure"] == "weights-dont-fit", data["errors"]
    assert "other processes" in data["errors"][0]


def test_an_oversized_kv_cache_memory_bytes_fails_at_kv_allocation_not_graph_capture() -> None:
    done = oomguard(
        "plan", "--gpu", "A100-80GB", "--json", "--", *MIXTRAL_EP, "--kv-cache-memory-bytes", "45GiB"
    )
    data = json.loads(done.stdout)
    assert data["failure"] == "kv-cache-allocation"
    assert "allocating the KV cache" in data["errors"][0]


def test_the_budget_line_with_kv_cache_memory_bytes_adds_up() -> None:
    done = oomguard(
        "plan", "--gpu", "A100-80GB", "--json", "--", *MIXTRAL_EP, "--kv-cache-memory-bytes", "25GiB"
    )
    rank = json.loads(done.stdout)["ranks"][0]
    in_budget = (
        rank["weights_gib"]
        + rank["kv_cache_gib"]
        + rank["activation_gib"]
        + rank["comm_buffers_gib"]
        + rank["cuda_graph_gib"]
        + rank["non_torch_gib"]
    )
    assert abs(rank["budget_gib"] - in_budget) < 0.02
    text = oomguard(
        "plan", "--gpu", "A100-80GB", "--", *MIXTRAL_EP, "--kv-cache-memory-bytes", "25GiB"
    ).stdout
    budget_line = next(line for line in text.splitlines() if "budget:" in line)
    weights_line = next(line for line in text.splitlines() if line.strip().startswith("weights"))
    # The number column lines up with the lines it sums.
    assert budget_line.index(".") - 2 == weights_line.index(".") - 2


def test_a_total_known_only_from_nvidia_smi_is_not_marked_exact() -> None:
    l4 = json.loads(oomguard("plan", "Qwen/Qwen3-8B", "--gpu", "L4", "--json").stdout)
    assert l4["gpu"]["total_kind"] == "estimated"
    h100 = json.loads(oomguard("plan", "Qwen/Qwen3-8B", "--gpu", "H100", "--json").stdout)
    assert h100["gpu"]["total_kind"] == "exact"
    text = oomguard("plan", "Qwen/Qwen3-8B", "--gpu", "L4").stdout
    total_line = next(line for line in text.splitlines() if "device total" in line)
    assert " exact " not in total_line and "est ±" in total_line


def test_verbose_shows_the_detail_text_whole() -> None:
    short = oomguard("plan", "Qwen/Qwen3-8B", "--gpu", "L4").stdout
    full = oomguard("plan", "Qwen/Qwen3-8B", "--gpu", "L4", "-v").stdout
    assert "..." in next(line for line in short.splitlines() if "device total" in line)
    assert "so this may overstate it)" in full


SMI_OTHER_PROCESS = str(Path(__file__).resolve().parent / "data" / "smi_h100_other_process.txt")


def test_other_processes_from_nvidia_smi_are_a_ledger_line_and_the_one_flag_fix_is_found() -> None:
    done = oomguard("plan", "Qwen/Qwen3-8B", "--nvidia-smi", SMI_OTHER_PROCESS, "--json")
    data = json.loads(done.stdout)
    assert data["failure"] == "startup-free-memory"
    rank = data["ranks"][0]
    assert abs(rank["other_processes_gib"] - 23994 / 1024) < 0.01
    # free at peak counts the other process: total - everything on the GPU.
    used = rank["gpu_used_gib"]
    assert used > 23.4 + rank["weights_gib"]
    fixes = [f for f in data["fixes"] if list(f["flags"]) == ["gpu_memory_utilization"]]
    assert fixes, data["fixes"]
    assert fixes[0]["flags"]["gpu_memory_utilization"] < (81090 - 23994 - 512) / 81090
    again = oomguard(
        "plan",
        "Qwen/Qwen3-8B",
        "--nvidia-smi",
        SMI_OTHER_PROCESS,
        "--no-fixes",
        "--gpu-memory-utilization",
        str(fixes[0]["flags"]["gpu_memory_utilization"]),
    )
    assert again.returncode == 0, again.stdout


def test_other_processes_given_as_a_size() -> None:
    data = json.loads(
        oomguard("plan", "Qwen/Qwen3-8B", "--gpu", "H100", "--other-processes", "23.4GiB", "--json").stdout
    )
    assert data["failure"] == "startup-free-memory"
    assert data["ranks"][0]["other_processes_gib"] == 23.4


def test_a_bare_gpu_memory_beside_a_named_gpu_is_an_error() -> None:
    done = oomguard("plan", "Qwen/Qwen3-8B", "--gpu", "H100", "--gpu-memory", "10")
    assert done.returncode == 2 and "no unit" in done.stderr


def test_with_data_parallel_the_headline_is_per_replica_with_the_deployment_total() -> None:
    args = ["plan", "Qwen/Qwen3-30B-A3B", "--gpu", "H200", "-dp", "8", "--enable-expert-parallel"]
    text = oomguard(*args, "--max-model-len", "32768").stdout
    assert "per DP replica; the deployment's 8 replicas hold" in text
    data = json.loads(oomguard(*args, "--max-model-len", "32768", "--json").stdout)
    assert data["deployment"]["kv_cache_tokens"] == 8 * data["kv_cache_tokens"]


def test_the_co_located_dp_incident_reads_as_kv_budgeted_for_one_replica() -> None:
    done = oomguard(
        "plan",
        "--gpu-memory",
        "80GiB",
        "--replicas-per-gpu",
        "2",
        "--json",
        "--",
        *MIXTRAL_EP,
        "--kv-cache-memory-bytes",
        "25GiB",
    )
    data = json.loads(done.stdout)
    assert data["failure"] == "replicas-exceed-gpu"
    assert "each replica holds its own KV cache" in data["errors"][0]
    assert "EP all2all buffers 12.00" in data["errors"][0]
