"""Evidence readers on the formats as tools print them: free, nvidia-smi (table and CSV, inside other text),
/metrics scrapes (old and new vLLM names, OpenMetrics, a cut body). Each fact points at its line."""

from __future__ import annotations

import io

from tests.diagnosis.conftest import top
from tests.test_hardware import SMI_TABLE_SHARED_A100

from oomguard.diagnosis.evidence import Evidence, GpuMemory, GpuProcess, HostMemory, LoadSample, StartupNumber
from oomguard.diagnosis.read import read_one
from oomguard.diagnosis.setup import recover_setup
from oomguard.hardware import find_gpu
from oomguard.units import MiB


def read(text: str, name: str = "evidence.txt") -> Evidence:
    evidence = Evidence()
    evidence.documents.append(read_one(name, io.BytesIO(text.encode()), evidence))
    return evidence


def host(evidence: Evidence) -> dict[str, float]:
    return {h.quantity: h.value for h in evidence.of(HostMemory)}


# --- free ------------------------------------------------------------------------------------------------

FREE_M = """$ free -m
               total        used        free      shared  buff/cache   available
Mem:          515669      509112        1204         112        5353        2911
Swap:              0           0           0
"""


def test_free_m_gives_total_used_and_available_in_mib():
    values = host(read(FREE_M))
    assert values == {"total": 515669 * MiB, "used": 509112 * MiB, "available": 2911 * MiB}


def test_free_h_reads_binary_suffixes():
    text = (
        "               total        used        free      shared  buff/cache   available\n"
        "Mem:           503Gi       497Gi       1.2Gi       112Mi       4.6Gi       2.8Gi\n"
    )
    values = host(read(text))
    assert values["total"] == 503 * 1024 * MiB and values["available"] == 2.8 * 1024 * MiB


def test_free_of_old_procps_takes_available_from_the_buffers_cache_row():
    text = (
        "$ free -m\n             total       used       free     shared    buffers     cached\n"
        "Mem:         64316      63900        416          0         12        388\n"
        "-/+ buffers/cache:      63500        816\nSwap:            0          0          0\n"
    )
    evidence = read(text)
    available = [h for h in evidence.of(HostMemory) if h.quantity == "available"]
    assert [(a.value, a.where.line) for a in available] == [(816 * MiB, 4)]


def test_plain_free_in_kib_is_told_apart_from_free_m_by_size():
    text = (
        "               total        used        free      shared  buff/cache   available\n"
        "Mem:       528045472   521330000     1233000      115000     5481000     2981000\n"
    )
    assert host(read(text))["total"] == 528045472 * 1024


def test_host_with_almost_nothing_available_and_a_killed_worker_is_host_ram(run_diagnose):
    _, result, _ = run_diagnose(
        FREE_M + "bash: line 1:  4242 Killed                  vllm serve Qwen/Qwen3-32B\n"
    )
    assert top(result) == "host-ram-oom"
    support = " ".join(e["why"] for e in result["causes"][0]["evidence"])
    assert "under 3% memory available" in support


# --- nvidia-smi ------------------------------------------------------------------------------------------

SMI_IN_A_LOG = (
    "(APIServer pid=1) INFO 06-01 09:20:16 [utils.py:278] non-default args: {'model': 'Qwen/Qwen3-8B'}\n"
    "$ nvidia-smi\n"
    + SMI_TABLE_SHARED_A100
    + "(APIServer pid=1) INFO 06-01 09:20:17 [api_server.py:1] vLLM API server version 0.11.0\n"
)


def test_nvidia_smi_table_inside_a_log_gives_the_gpu_and_its_processes_at_their_lines():
    evidence = read(SMI_IN_A_LOG)
    [gpu] = evidence.of(GpuMemory)
    lines = SMI_IN_A_LOG.splitlines()
    assert gpu.name == "NVIDIA A100-SXM4-80GB" and gpu.used == 79872 * MiB and gpu.total == 81920 * MiB
    assert lines[gpu.where.line - 1].startswith("|   0  NVIDIA A100-SXM4-80GB")
    procs = evidence.of(GpuProcess)
    assert [(p.pid, p.used) for p in procs] == [(48213, 61440 * MiB), (51877, 18420 * MiB)]
    assert "train_lora" in lines[procs[1].where.line - 1]


def test_the_setup_takes_the_cuda_total_of_the_nvidia_smi_gpu_not_its_memory_total():
    setup = recover_setup(read(SMI_IN_A_LOG))
    assert setup.gpu_name == "NVIDIA A100-SXM4-80GB"
    cuda_total = find_gpu("NVIDIA A100-SXM4-80GB").total_bytes  # what cudaMemGetInfo reports
    assert setup.gpu_total_bytes == cuda_total and cuda_total < 81920 * MiB


def test_an_oom_message_total_beats_the_catalog():
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
        "of "
        "79.10 GiB of which 1.00 GiB is free.\n"
    )
    setup = recover_setup(read(SMI_IN_A_LOG + oom))
    assert setup.gpu_total_bytes == round(79.10 * 1024 * MiB)


def test_a_second_process_in_the_nvidia_smi_table_is_a_shared_gpu(run_diagnose):
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity "
        "of "
        "79.15 GiB of which 420.00 MiB is free.\n"
    )
    _, result, _ = run_diagnose(SMI_IN_A_LOG + oom)
    assert top(result) == "other-process-or-shared-gpu"


def test_query_csvs_for_gpus_and_compute_apps():
    text = (
        "index, name, memory.total [MiB], memory.used [MiB], memory.free [MiB]\n"
        "0, NVIDIA A100-SXM4-80GB, 81920 MiB, 81000 MiB, 920 MiB\n"
        "\n"
        "pid, process_name, used_gpu_memory [MiB]\n"
        "48213, python3, 61440 MiB\n"
        "51877, ComfyUI, 19000 MiB\n"
    )
    evidence = read(text)
    [gpu] = evidence.of(GpuMemory)
    assert (gpu.gpu, gpu.used, gpu.where.line) == (0, 81000 * MiB, 2)
    assert [(p.pid, p.name, p.where.line) for p in evidence.of(GpuProcess)] == [
        (48213, "python3", 5),
        (51877, "ComfyUI", 6),
    ]


def test_a_malformed_gpu_csv_is_skipped_with_a_note():
    evidence = read("index, name, memory.total [MiB]\n0, NVIDIA A30, lots MiB\n")
    assert not evidence.of(GpuMemory)
    assert any("nvidia-smi CSV not read" in s for s in evidence.documents[0].skipped)


# --- /metrics --------------------------------------------------------------------------------------------


def scrape(kv_name: str, usage: float, waiting: int, extra: str = "") -> str:
    return (
        f"# HELP {kv_name} KV-cache usage. 1 means 100 percent usage.\n# TYPE {kv_name} gauge\n"
        f'{kv_name}{{engine="0",model_name="Qwen/Qwen3-8B"}} {usage}\n'
        f'vllm:num_requests_waiting{{engine="0",model_name="Qwen/Qwen3-8B"}} {waiting}.0\n' + extra
    )


def test_metrics_of_old_versions_use_gpu_cache_usage_perc():
    evidence = read(scrape("vllm:gpu_cache_usage_perc", 0.97, 12), "metrics.prom")
    [sample] = evidence.of(LoadSample)
    assert (sample.kv_usage, sample.waiting, sample.engine, sample.where.line) == (0.97, 12, "0", 3)


def test_when_both_kv_names_are_served_the_new_one_wins():
    text = (
        scrape("vllm:gpu_cache_usage_perc", 0.5, 0)
        + scrape("vllm:kv_cache_usage_perc", 0.25, 0).split("vllm:num_requests_waiting")[0]
    )
    [sample] = read(text, "metrics.prom").of(LoadSample)
    assert sample.kv_usage == 0.25


def test_concatenated_scrapes_give_one_sample_each_and_the_cache_config():
    info = (
        '# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="16",engine="0",'
        'gpu_memory_utilization="0.9",num_gpu_blocks="29751"} 1.0\n'
    )
    text = "".join(
        scrape("vllm:kv_cache_usage_perc", u, w, info) for u, w in ((0.4, 0), (0.8, 3), (0.99, 40))
    )
    evidence = read(text, "scrapes.txt")
    assert [s.kv_usage for s in evidence.of(LoadSample)] == [0.4, 0.8, 0.99]
    blocks = [n.value for n in evidence.of(StartupNumber) if n.quantity == "num_gpu_blocks"]
    assert blocks == [29751.0] * 3


def test_openmetrics_body_with_exemplars_and_eof_is_read():
    text = (
        '# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine="0"} 0.91\n'
        "# TYPE vllm:request_success counter\n"
        'vllm:request_success_total{engine="0",finished_reason="stop"} 12.0 # {trace_id="abc"} 1.0\n# EOF\n'
    )
    [sample] = read(text, "metrics.prom").of(LoadSample)
    assert sample.kv_usage == 0.91


def test_a_scrape_cut_mid_line_keeps_the_lines_before_and_says_so():
    text = scrape("vllm:kv_cache_usage_perc", 0.3, 1) + "process_resident_memory_bytes 4.2e"
    evidence = read(text, "metrics.prom")
    assert [s.kv_usage for s in evidence.of(LoadSample)] == [0.3]
    assert any("cut short" in s for s in evidence.documents[0].skipped)
