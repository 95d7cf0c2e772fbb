"""Fixes a new user can trust and paste: the planner's verified value wins, unverified ones say so, nothing
is both a fix and 'does not help', values paste as flags, Ray and EP failures get their own levers."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from oomguard.diagnosis.diagnosis import diagnose
from oomguard.diagnosis.evidence import Evidence
from oomguard.diagnosis.read import read_one
from oomguard.diagnosis.remedies import UNVERIFIED, Fix, merge_fixes, without_contradictions


def diagnosis(text: str):
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(text.encode()), evidence)
    return diagnose(evidence)


def test_the_planners_verified_value_beats_an_unverified_one_on_the_same_flag():
    planned = [
        Fix(
            {"gpu_memory_utilization": "0.934"},
            "--gpu-memory-utilization 0.934 [re-planned: fits]",
            "planner",
        )
    ]
    own = [
        Fix({"gpu_memory_utilization": "0.85"}, "--gpu-memory-utilization 0.85: a larger budget", "evidence")
    ]
    merged = merge_fixes(planned, own, setup_known=True)
    assert [f.flags for f in merged] == [{"gpu_memory_utilization": "0.934"}]


def test_unverified_fixes_say_so_when_the_setup_is_known():
    own = [Fix({"max_num_seqs": "128"}, "--max-num-seqs 128: fewer rows", "mechanism")]
    assert merge_fixes([], own, setup_known=True)[0].summary.endswith(UNVERIFIED)
    assert not merge_fixes([], own, setup_known=False)[0].summary.endswith(UNVERIFIED)


def test_a_change_is_never_both_a_fix_and_does_not_help():
    fixes = (Fix({"max_num_batched_tokens": "8192"}, "--max-num-batched-tokens 8192", "evidence"),)
    kept = without_contradictions(
        ("Lowering --max-num-batched-tokens does not change the KV pool.", "Lowering --max-model-len: no."),
        fixes,
    )
    assert kept == ("Lowering --max-model-len: no.",)


def test_every_fix_on_the_dev_reports_pastes_as_a_flag_and_never_contradicts_itself(
    shared_data: Path,
) -> None:
    flag_with_commas = re.compile(r"--[a-z][a-z-]+[ =]\d{1,3}(,\d{3})+\b")
    for line in (shared_data / "validation" / "oom_reports_dev.jsonl").read_text().splitlines():
        row = json.loads(line)
        for cause in diagnosis(row["evidence"]).causes:
            for fix in cause.fixes:
                assert not flag_with_commas.search(fix.summary), (row["id"], fix.summary)
            changed = {k.replace("_", "-") for f in cause.fixes for k in f.flags}
            for note in cause.not_helpful:
                assert not any(f"--{flag}" in note for flag in changed), (row["id"], note)


# Ray's memory monitor (https://github.com/vllm-project/vllm/issues/2669).
RAY_KILL = (
    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
    "Memory on the node (IP: 169.254.181.2, ID: 708c7baf966d59aa3f08299830c349ca055293ebb1c33d8e72cd3336) "
    "where "
    "the task (actor ID: 0dab4ab45f6c947201afac6d01000000, name=RayWorkerVllm.__init__, pid=308, memory "
    "used=11.15GB) was running was 12.49GB / 13.15GB (0.950003), which exceeds the memory usage threshold of "
    "0.95. Ray killed this worker (ID: 79a553ea91fe46f95e8384ddf8a8f0a01e3418a975ecd0af983c7bb2) because it "
    "was "
    "the most recently scheduled task.\n"
)


def test_a_ray_memory_kill_gets_rays_own_levers_and_no_multimodal_cause():
    result = diagnosis(RAY_KILL)
    assert result.causes[0].cls == "host-ram-oom"
    assert "RAY_memory_usage_threshold" in result.causes[0].fixes[0].flags
    assert "multimodal-encoder" not in [c.cls for c in result.causes]


# A DeepEP buffer OOM as vLLM logs it: the command sets the KV pool, the buffer asks for 12 GiB, 9.21 GiB
# free.
EP_BUFFER = """\
INFO 11-20 10:00:00 [api_server.py:1000] vLLM API server version 0.11.0
INFO 11-20 10:00:00 [utils.py:200] non-default args: {'model': 'mistralai/Mixtral-8x7B-Instruct-v0.1', \
'tensor_parallel_size': 2, 'data_parallel_size': 2, 'enable_expert_parallel': True, 'kv_cache_memory_bytes': \
'25GiB', 'all2all_backend': 'deepep_high_throughput'}
(EngineCore_DP0 pid=312) ERROR 11-20 10:02:00 [core.py:700]   File "/usr/local/lib/python3.12/dist-packages/\
deep_ep/buffer.py", line 90, in __init__
(EngineCore_DP0 pid=312) ERROR 11-20 10:02:00 [core.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to \
allocate 12.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 9.21 GiB is free. Including non-PyTorch \
memory, this process has 69.97 GiB memory in use. Of the allocated memory 66.10 GiB is allocated by PyTorch, and \
1.20 GiB is reserved by PyTorch but unallocated.
"""  # noqa: E501


def test_ep_buffer_fix_uses_the_logged_size_and_the_kv_bytes_the_command_set():
    result = diagnosis(EP_BUFFER)
    ep = next(c for c in result.causes if c.cls == "ep-all2all-buffer")
    assert result.causes[0].cls == "ep-all2all-buffer"
    flags = [f.flags for f in ep.fixes]
    buffer = next(int(f["VLLM_DEEPEP_BUFFER_SIZE_MB"]) for f in flags if "VLLM_DEEPEP_BUFFER_SIZE_MB" in f)
    assert buffer < 9.21 * 1024  # fits in what was free
    assert {"kv_cache_memory_bytes": "21GiB"} in flags  # 25 - (12 - 9.21) - 1, rounded down
    assert not any(k.startswith("SGLANG_") for f in flags for k in f)


# vLLM's own text for an empty KV pool (vLLM v0.10, v1/core/kv_cache_utils.py), with no command in the log.
NO_KV = (
    "(EngineCore_DP0 pid=321) ERROR 09-15 10:00:00 [core.py:700] ValueError: No available memory for the "
    "cache "
    "blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n"
)


def test_command_gpu_and_version_options_supply_the_setup_so_fixes_are_re_planned(run_diagnose):
    args = (
        "--json",
        "--command",
        "vllm serve Qwen/Qwen3-32B --gpu-memory-utilization 0.8 --max-model-len 40960",
        "--gpu",
        "H100",
        "--vllm-version",
        "0.10.2",
    )
    code, result, _ = run_diagnose(NO_KV, args=args)
    assert code == 0
    assert result["setup"]["model"] == "Qwen/Qwen3-32B" and result["setup"]["version"] == "0.10.2"
    fixes = result["causes"][0]["fixes"]
    assert fixes[0]["basis"] == "planner"
    utilizations = [
        f["flags"]["gpu_memory_utilization"] for f in fixes if "gpu_memory_utilization" in f["flags"]
    ]
    assert len(utilizations) == 1  # the verified value only, not also an unverified guess


def test_an_unknown_gpu_option_is_a_one_line_error(run_diagnose):
    code, _, err = run_diagnose(NO_KV, args=("--gpu", "H900"))
    assert code == 2 and "--gpu 'H900'" in err and len(err.strip().splitlines()) == 1


# `kubectl describe pod` of a vLLM deployment (the layout kubectl prints; the image tag is the version).
KUBECTL_DESCRIBE = """\
Containers:
  vllm:
    Container ID:  containerd://4f1c2e
    Image:         vllm/vllm-openai:v0.10.2
    Image ID:      docker.io/vllm/vllm-openai@sha256:8a1f
    Port:          8000/TCP
    Command:
      vllm
      serve
    Args:
      Qwen/Qwen3-32B
      --gpu-memory-utilization
      0.8
      --max-model-len
      40960
    State:          Waiting
      Reason:       CrashLoopBackOff
    Last State:     Terminated
      Reason:       Error
      Exit Code:    1
    Restart Count:  4
    Limits:
      memory:          64Gi
      nvidia.com/gpu:  1
"""


def test_setup_is_read_from_kubectl_describe_args_and_image_tag():
    evidence = Evidence()
    read_one("describe.txt", io.BytesIO((KUBECTL_DESCRIBE + NO_KV).encode()), evidence)
    setup = diagnose(evidence).setup
    assert setup.version == "0.10.2" and setup.model == "Qwen/Qwen3-32B"
    assert setup.flags["gpu_memory_utilization"] == "0.8" and setup.flags["max_model_len"] == "40960"


def test_a_directory_of_different_incidents_says_so(run_diagnose):
    first = "INFO 09-15 10:00:00 [utils.py:200] non-default args: {'model': 'Qwen/Qwen3-8B'}\n" + NO_KV
    second = "INFO 09-16 11:00:00 [utils.py:200] non-default args: {'model': 'Qwen/Qwen3-32B'}\n" + NO_KV
    code, result, _ = run_diagnose(first, second, names=("a/vllm.log", "b/vllm.log"))
    assert code == 0
    assert any("2 different deployments" in s for s in result["skipped"])
