"""The GPU catalog: CUDA totals, name matching as people and nvidia-smi write names, nvidia-smi parsing.

The nvidia-smi texts below are copied from public reports (source above each one).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oomguard.errors import ConfigError, InputFormatError, OomguardError, UnknownGpuError
from oomguard.hardware import (
    CATALOG,
    DEFAULT_CHOICES,
    Gpu,
    catalog,
    find_gpu,
    gpu_by_key,
    gpu_with_memory,
    parse_nvidia_smi,
    parse_nvidia_smi_processes,
)
from oomguard.units import GiB, MiB

# vLLM issue #7768 (driver 535, RTX 4090, one GPU row of a 4-GPU box).
SMI_TABLE_4090 = """\
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2     |
|-----------------------------------------+----------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |
|                                         |                      |               MIG M. |
|=========================================+======================+======================|
|   0  NVIDIA GeForce RTX 4090        On  | 00000000:1E:00.0 Off |                  Off |
| 30%   26C    P8              16W / 450W |  14214MiB / 24564MiB |      0%      Default |
|                                         |                      |                  N/A |
+-----------------------------------------+----------------------+----------------------+
"""

# An HPC centre's user guide (driver 550.54.15, two H100 SXM, with the processes table after it).
SMI_TABLE_H100 = """\
Wed Mar 12 16:20:53 2025
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:04:00.0 Off |                    0 |
| N/A   40C    P0             71W /  699W |       0MiB /  81559MiB |      0%      Default |
|                                         |                        |             Disabled |
+-----------------------------------------+------------------------+----------------------+
|   1  NVIDIA H100 80GB HBM3          On  |   00000000:64:00.0 Off |                    0 |
| N/A   40C    P0             73W /  699W |       0MiB /  81559MiB |      0%      Default |
|                                         |                        |             Disabled |
+-----------------------------------------+------------------------+----------------------+

+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
|  No running processes found                                                             |
+-----------------------------------------------------------------------------------------+
"""

# noonghunna/club-3090 issue #747 (driver 610, the newer "KMD Version" header; Off | ... On).
SMI_TABLE_3090_DRIVER_610 = """\
Tue Jul 21 11:59:20 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 610.43.03              KMD Version: 610.43.03     CUDA UMD Version: 13.3     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA GeForce RTX 3090        Off |   00000000:04:00.0  On |                  N/A |
| 37%   45C    P8             16W /  250W |   21865MiB /  24576MiB |      0%      Default |
|                                         |                        |                  N/A |
+-----------------------------------------+------------------------+----------------------+
|   1  NVIDIA GeForce RTX 3090        Off |   00000000:09:00.0 Off |                  N/A |
| 40%   52C    P8             31W /  250W |   21487MiB /  24576MiB |      0%      Default |
|                                         |                        |                  N/A |
+-----------------------------------------+------------------------+----------------------+
"""

# A ray job log: every table line carries a "(simple-workload, pid=4150)" prefix.
SMI_TABLE_PREFIXED = """\
  (simple-workload, pid=4150) |=========================================+========================+======================|
  (simple-workload, pid=4150) |   0  NVIDIA H100 80GB HBM3          On  |   00000000:0F:00.0 Off |                    0 |
  (simple-workload, pid=4150) | N/A   29C    P0             69W /  700W |       0MiB /  81559MiB |      0%      Default |
"""  # noqa: E501

# `nvidia-smi --query-gpu=index,name,memory.total --format=csv` on two A30s (a BioNeMo setup log).
SMI_CSV_A30 = """\
index, name, memory.total [MiB]
0, NVIDIA A30, 24576
1, NVIDIA A30, 24576
"""

# `--query-gpu=name,memory.total,driver_version --format=csv` on a Windows RTX PRO 6000 box.
SMI_CSV_PRO6000 = """\
name, memory.total [MiB], driver_version
NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 97887 MiB, 596.59
"""

# `--query-gpu=name,memory.total --format=csv,noheader` (an H200 NVL workshop guide).
SMI_CSV_H200_NVL_NOHEADER = "NVIDIA H200 NVL, 143771 MiB\n"

# `--query-gpu=name,memory.total,driver_version --format=csv,noheader` on a DGX Spark: unified
# memory, so nvidia-smi has no memory total.
SMI_CSV_GB10_NA = "NVIDIA GB10, [N/A], 580.126.09\n"


# --- the catalog -------------------------------------------------------------------------------------


def test_h100_total_is_what_cuda_reports_not_the_marketing_80gb() -> None:
    h100 = find_gpu("H100")
    assert h100.total_bytes == 85_029_158_912
    assert round(h100.total_bytes / GiB, 2) == 79.19


def test_every_entry_says_where_its_total_comes_from_and_is_below_the_nvidia_smi_total() -> None:
    for gpu in CATALOG:
        assert gpu.total_source.strip(), gpu.key
        assert gpu.total_bytes > 4 * GiB, gpu.key
        if gpu.nvidia_smi_total_mib is not None:
            assert gpu.total_bytes <= gpu.nvidia_smi_total_mib * MiB, gpu.key


def test_keys_are_unique_and_lookup_by_key_round_trips() -> None:
    keys = [gpu.key for gpu in catalog()]
    assert len(keys) == len(set(keys))
    for gpu in catalog():
        assert gpu_by_key(gpu.key) is gpu
        assert find_gpu(gpu.key) is gpu
        assert find_gpu(gpu.name) is gpu


@pytest.mark.parametrize(
    "key",
    [
        "h100-sxm-80gb",
        "h100-pcie-80gb",
        "h100-nvl-94gb",
        "h200-sxm-141gb",
        "h200-nvl-141gb",
        "h20-96gb",
        "h800-80gb",
        "gh200-96gb",
        "gh200-144gb",
        "b200-180gb",
        "b300-288gb",
        "gb200-186gb",
        "gb300-288gb",
        "a100-sxm-40gb",
        "a100-sxm-80gb",
        "a100-pcie-40gb",
        "a100-pcie-80gb",
        "a800-80gb",
        "a10-24gb",
        "a10g-24gb",
        "a30-24gb",
        "a40-48gb",
        "l4-24gb",
        "l40-48gb",
        "l40s-48gb",
        "rtx-3090",
        "rtx-4090",
        "rtx-5090",
        "rtx-a6000",
        "rtx-6000-ada",
        "rtx-pro-6000-blackwell",
        "t4-16gb",
        "v100-sxm2-16gb",
        "v100-sxm2-32gb",
        "mi250x",
        "mi300x",
        "mi325x",
        "mi355x",
        "dgx-spark-gb10",
    ],
)
def test_catalog_covers_the_gpus_people_serve_on(key: str) -> None:
    assert gpu_by_key(key).key == key


def test_validation_totals_match_the_catalog(shared_data: Path) -> None:
    """Where a real vLLM run logged the device total, the catalog entry for that GPU agrees to 0.01 GiB."""
    checked = 0
    for line in (shared_data / "validation" / "vllm_startup_dev.jsonl").read_text().splitlines():
        row = json.loads(line)
        name, total = row.get("gpu_name") or "", row.get("gpu_total_gib")
        if total is None or not name.startswith(("NVIDIA H100 80GB HBM3", "NVIDIA L40S")):
            continue
        gpu = find_gpu(name.split(" (")[0])
        assert abs(gpu.total_bytes / GiB - total) <= 0.011, (name, total)
        checked += 1
    assert checked >= 3


def test_only_orin_thor_and_spark_class_parts_are_unified_memory() -> None:
    assert find_gpu("DGX Spark").unified_memory
    assert find_gpu("DGX Spark").compute_capability == (12, 1)
    assert not find_gpu("GH200").unified_memory  # vLLM reads GH200's HBM with cudaMemGetInfo
    assert not find_gpu("H100").unified_memory


def test_amd_parts_have_no_compute_capability() -> None:
    mi300x = find_gpu("mi300x")
    assert mi300x.vendor == "amd" and mi300x.compute_capability is None
    assert round(mi300x.total_bytes / GiB, 2) == 191.98


# --- name matching -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("H100", "h100-sxm-80gb"),
        ("h100-80gb", "h100-sxm-80gb"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm-80gb"),
        ("h100 sxm5", "h100-sxm-80gb"),
        ("H100 PCIe", "h100-pcie-80gb"),
        ("h100-nvl", "h100-nvl-94gb"),
        ("a100 40gb", "a100-sxm-40gb"),
        ("A100 80 GB", "a100-sxm-80gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
        ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
        ("A100-PCIE-40GB", "a100-pcie-40gb"),
        ("4090", "rtx-4090"),
        ("RTX 4090", "rtx-4090"),
        ("NVIDIA GeForce RTX 3090", "rtx-3090"),
        ("mi300x", "mi300x"),
        ("AMD Instinct MI300X", "mi300x"),
        ("Tesla T4", "t4-16gb"),
        ("t4", "t4-16gb"),
        ("L40", "l40-48gb"),
        ("l40s", "l40s-48gb"),
        ("A10", "a10-24gb"),
        ("a10g", "a10g-24gb"),
        ("H200", "h200-sxm-141gb"),
        ("NVIDIA H200 NVL", "h200-nvl-141gb"),
        ("GH200", "gh200-96gb"),
        ("NVIDIA GH200 144G HBM3e", "gh200-144gb"),
        ("NVIDIA B300 SXM6 AC", "b300-288gb"),
        ("rtx 6000 ada", "rtx-6000-ada"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000-blackwell"),
        ("NVIDIA GB10", "dgx-spark-gb10"),
        ("dgx-spark", "dgx-spark-gb10"),
    ],
)
def test_names_match_as_people_and_nvidia_smi_write_them(text: str, key: str) -> None:
    assert find_gpu(text).key == key


def test_matching_ignores_case_spaces_and_dashes() -> None:
    assert find_gpu("  nvidia   h100-80GB  hbm3 ").key == find_gpu("NVIDIA H100 80GB HBM3").key
    assert find_gpu("RTX-4090") is find_gpu("rtx4090")


def test_plain_a100_is_ambiguous_and_lists_the_candidates() -> None:
    with pytest.raises(UnknownGpuError) as err:
        find_gpu("A100")
    message = str(err.value)
    for key in ("a100-sxm-80gb", "a100-pcie-80gb", "a100-sxm-40gb", "a100-pcie-40gb"):
        assert key in message
    assert "\n" not in message


def test_every_documented_default_resolves_to_its_target() -> None:
    by_key = {gpu.key: gpu for gpu in CATALOG}
    for query, key in DEFAULT_CHOICES.items():
        assert key in by_key
        assert find_gpu(query).key == key


def test_unknown_name_suggests_close_names_and_the_memory_override() -> None:
    with pytest.raises(UnknownGpuError) as err:
        find_gpu("H1000")
    message = str(err.value)
    assert "h100" in message and "--gpu-memory" in message


def test_mig_slices_are_refused_with_the_memory_override() -> None:
    with pytest.raises(UnknownGpuError, match="--gpu-memory"):
        find_gpu("NVIDIA A100 80GB PCIe MIG 1g.10gb")


def test_empty_name_is_a_user_error() -> None:
    with pytest.raises(OomguardError):
        find_gpu("   ")


# --- --gpu-memory ------------------------------------------------------------------------------------


def test_gpu_memory_in_gib_reproduces_the_h100_total() -> None:
    assert gpu_with_memory("79.19GiB").total_bytes == round(79.19 * GiB)


def test_gpu_memory_accepts_bytes_and_mib() -> None:
    assert gpu_with_memory(85_029_158_912).total_bytes == 85_029_158_912
    assert gpu_with_memory("81559MiB").total_bytes == 81559 * MiB


def test_gpu_memory_with_a_known_name_keeps_its_traits_and_replaces_the_total() -> None:
    spark = gpu_with_memory("121.69GiB", "DGX Spark")
    assert spark.unified_memory and spark.compute_capability == (12, 1)
    assert spark.total_bytes == round(121.69 * GiB)
    assert "user" in spark.total_source


def test_gpu_memory_with_an_unknown_name_is_still_usable() -> None:
    gpu = gpu_with_memory("22GiB", "NVIDIA GeForce RTX 2080 Ti 22GB (modded)")
    assert isinstance(gpu, Gpu) and gpu.total_bytes == 22 * GiB and gpu.key == "custom"


@pytest.mark.parametrize("bad", ["0", "-3GiB", "lots", "80 parsecs"])
def test_bad_gpu_memory_is_a_one_line_user_error(bad: str) -> None:
    with pytest.raises(ConfigError):
        gpu_with_memory(bad)


# --- nvidia-smi --------------------------------------------------------------------------------------


def test_default_table_gives_name_used_and_total() -> None:
    [reading] = parse_nvidia_smi(SMI_TABLE_4090)
    assert reading.index == 0 and reading.name == "NVIDIA GeForce RTX 4090"
    assert reading.memory_used_bytes == 14214 * MiB
    assert reading.memory_total_bytes == 24564 * MiB
    assert reading.utilization_percent == 0.0
    assert reading.gpu is not None and reading.gpu.key == "rtx-4090"


def test_default_table_reads_every_gpu_and_skips_the_process_table() -> None:
    readings = parse_nvidia_smi(SMI_TABLE_H100)
    assert [r.index for r in readings] == [0, 1]
    assert all(r.memory_total_bytes == 81559 * MiB for r in readings)
    # The reading's GPU carries the CUDA total, not nvidia-smi's larger memory.total.
    assert readings[0].gpu is not None and readings[0].gpu.total_bytes == 85_029_158_912


def test_default_table_of_newer_drivers() -> None:
    readings = parse_nvidia_smi(SMI_TABLE_3090_DRIVER_610)
    assert [(r.index, r.memory_used_bytes) for r in readings] == [(0, 21865 * MiB), (1, 21487 * MiB)]
    assert {r.name for r in readings} == {"NVIDIA GeForce RTX 3090"}


def test_default_table_inside_a_prefixed_log() -> None:
    [reading] = parse_nvidia_smi(SMI_TABLE_PREFIXED)
    assert reading.name == "NVIDIA H100 80GB HBM3" and reading.memory_total_bytes == 81559 * MiB


def test_csv_with_header_and_units_free_columns() -> None:
    readings = parse_nvidia_smi(SMI_CSV_A30)
    assert [(r.index, r.name, r.memory_total_bytes) for r in readings] == [
        (0, "NVIDIA A30", 24576 * MiB),
        (1, "NVIDIA A30", 24576 * MiB),
    ]
    assert readings[0].gpu is not None and readings[0].gpu.key == "a30-24gb"


def test_csv_with_header_and_units_ignores_unknown_columns() -> None:
    [reading] = parse_nvidia_smi(SMI_CSV_PRO6000)
    assert reading.memory_total_bytes == 97887 * MiB
    assert reading.gpu is not None and reading.gpu.key == "rtx-pro-6000-blackwell"


def test_csv_without_header() -> None:
    [reading] = parse_nvidia_smi(SMI_CSV_H200_NVL_NOHEADER)
    assert reading.name == "NVIDIA H200 NVL" and reading.memory_total_bytes == 143771 * MiB
    assert reading.gpu is not None and reading.gpu.key == "h200-nvl-141gb"


def test_csv_not_available_fields_become_none() -> None:
    [reading] = parse_nvidia_smi(SMI_CSV_GB10_NA)
    assert reading.name == "NVIDIA GB10" and reading.memory_total_bytes is None
    assert reading.gpu is not None and reading.gpu.unified_memory


def test_csv_with_explicit_columns_for_a_headerless_custom_query() -> None:
    [reading] = parse_nvidia_smi(
        "23028, 21000, NVIDIA A10G\n", columns=["memory.total", "memory.used", "name"]
    )
    assert reading.name == "NVIDIA A10G" and reading.memory_used_bytes == 21000 * MiB


def test_unknown_gpu_in_nvidia_smi_is_sized_from_its_own_total() -> None:
    [reading] = parse_nvidia_smi("NVIDIA GeForce RTX 5060 Ti, 16311 MiB\n")
    gpu = reading.gpu
    assert gpu is not None and gpu.total_bytes == 16311 * MiB and "nvidia-smi" in gpu.total_source


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "\x00\x01\x02binary",
        "hello world\n",
        "index, name, memory.total [MiB]\n0, NVIDIA A30\n",
        "name, memory.total [MiB]\nNVIDIA A30, lots MiB\n",
    ],
)
def test_garbage_nvidia_smi_input_is_a_one_line_user_error(bad: str) -> None:
    with pytest.raises(InputFormatError) as err:
        parse_nvidia_smi(bad)
    assert "\n" not in str(err.value)


SMI_TABLE_SHARED_A100 = """\
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2     |
|-----------------------------------------+----------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |
|=========================================+======================+======================|
|   0  NVIDIA A100-SXM4-80GB          On  | 00000000:07:00.0 Off |                    0 |
| N/A   33C    P0              62W / 400W |  79872MiB / 81920MiB |      0%      Default |
+-----------------------------------------+----------------------+----------------------+

+---------------------------------------------------------------------------------------+
| Processes:                                                                            |
|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |
|        ID   ID                                                             Usage      |
|=======================================================================================|
|    0   N/A  N/A     48213      C   /opt/conda/bin/python3                    61440MiB |
|    0   N/A  N/A     51877      C   python train_lora.py                      18420MiB |
+---------------------------------------------------------------------------------------+
"""


def test_readings_carry_the_line_they_were_read_from() -> None:
    [reading] = parse_nvidia_smi(SMI_TABLE_SHARED_A100)
    assert SMI_TABLE_SHARED_A100.splitlines()[reading.lineno - 1].startswith("|   0  NVIDIA A100-SXM4-80GB")
    rows = parse_nvidia_smi(
        "index, name, memory.total [MiB]\n\n0, NVIDIA A30, 24576 MiB\n1, NVIDIA A30, 24576 MiB\n"
    )
    assert [r.lineno for r in rows] == [3, 4]


def test_process_table_rows_give_gpu_pid_name_and_memory() -> None:
    procs = parse_nvidia_smi_processes(SMI_TABLE_SHARED_A100)
    assert [(p.gpu_index, p.pid, p.name, p.used_bytes) for p in procs] == [
        (0, 48213, "/opt/conda/bin/python3", 61440 * MiB),
        (0, 51877, "python train_lora.py", 18420 * MiB),
    ]
    assert SMI_TABLE_SHARED_A100.splitlines()[procs[1].lineno - 1].strip().endswith("18420MiB |")


def test_process_rows_of_old_drivers_without_gi_ci_columns() -> None:
    [proc] = parse_nvidia_smi_processes(
        "|    1     12345      C   python                                      15000MiB |\n"
    )
    assert (proc.gpu_index, proc.pid, proc.used_bytes) == (1, 12345, 15000 * MiB)


def test_query_compute_apps_csv_skips_rows_whose_memory_is_not_available() -> None:
    text = "pid, process_name, used_gpu_memory [MiB]\n48213, python3, 61440 MiB\n977, Xorg, [N/A]\n"
    [proc] = parse_nvidia_smi_processes(text)
    assert (proc.gpu_index, proc.pid, proc.name, proc.used_bytes, proc.lineno) == (
        None,
        48213,
        "python3",
        61440 * MiB,
        2,
    )


def test_no_running_processes_is_an_empty_list() -> None:
    assert parse_nvidia_smi_processes(SMI_TABLE_H100) == []


def test_a_device_total_larger_than_any_gpu_is_refused_as_a_unit_slip() -> None:
    with pytest.raises(ConfigError, match="more than any device holds"):
        gpu_with_memory("1.67e299")
    assert gpu_with_memory("141GiB").total_bytes == 141 * (1 << 30)
