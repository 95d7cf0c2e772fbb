"""The reporter-sentence patterns read sentences only: tables, headers, dict dumps and log lines are machine
text and say nothing in words. Each case is a false positive a new user met (real text, sources cited)."""

from __future__ import annotations

import io

from tests.test_hardware import SMI_TABLE_H100

from oomguard.diagnosis.diagnosis import diagnose
from oomguard.diagnosis.evidence import Evidence, Signal
from oomguard.diagnosis.read import read_one


def prose_signals(text: str) -> list[str]:
    evidence = Evidence()
    read_one("evidence.txt", io.BytesIO(text.encode()), evidence)
    return [s.name for s in evidence.of(Signal) if s.name.startswith("prose-")]


# nvidia-smi of empty GPUs, as the driver prints it (the header carries "MIG M.").
SMI_EMPTY = SMI_TABLE_H100

# Ray's memory monitor (https://github.com/vllm-project/vllm/issues/1160): "Consider provisioning more
# memory".
RAY_MONITOR = """\
(raylet) [2023-09-23 10:01:02,117 E 135782 135782] (raylet) node_manager.cc:3007: 2 Workers (tasks / actors) \
killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: abd406d415bd2b74a5e28196\
8fd76aa200d56e4529fd1c1cd4373840, IP: 10.0.167.26) over the last time period. To see more information about the \
Workers killed on this node, use `ray logs raylet.out -ip 10.0.167.26`
(raylet)
(raylet) Refer to the documentation on how to address the out of memory issue: \
https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Consider provisioning more memory on \
this node or reducing task parallelism by requesting more CPUs per task. To adjust the kill threshold, set the \
environment variable `RAY_memory_usage_threshold` when starting Ray. To disable worker killing, set the \
environment variable `RAY_memory_monitor_refresh_ms` to zero.
"""  # noqa: E501

# vLLM's scheduler dump at an engine death (https://github.com/noonghunna/club-3090/issues/613).
SCHEDULER_DUMP = (
    "(EngineCore pid=113) ERROR 07-07 21:11:20 [dump_input.py:81] Dumping scheduler output for model "
    "execution: "
    "SchedulerOutput(scheduled_new_reqs=[], num_scheduled_tokens={chatcmpl-ba52b6d797b5d436-9ab2df7a: 8000}, "
    "total_num_scheduled_tokens=8000, scheduled_spec_decode_tokens={}, scheduled_encoder_inputs={}, "
    "num_common_prefix_blocks=[0, 0, 0, 6], finished_req_ids=[], free_encoder_mm_hashes=[], "
    "preempted_req_ids=[])\n"
    "(EngineCore pid=113) ERROR 07-07 21:11:20 [dump_input.py:81] Dumping scheduler stats: "
    "SchedulerStats(num_running_reqs=1, num_waiting_reqs=0, kv_cache_usage=0.15384615384615385, "
    "spec_decoding_stats=None, waiting_lora_adapters={}, running_lora_adapters={})\n"
    "(EngineCore pid=113) ERROR 07-07 21:11:20 [core.py:1233] EngineCore encountered a fatal error.\n"
)

# The kernel OOM killer's task table, as dmesg prints it.
DMESG_TABLE = """\
[12345.678901] Tasks state (memory values in pages):
[12345.678902] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name
[12345.678903] [   1234]     0  1234 60123456 41234567  335872000        0             0 python3
[12345.678990] Out of memory: Killed process 1234 (python3) total-vm:240493824kB, anon-rss:164938268kB, \
file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:328000kB oom_score_adj:0
"""


def test_nvidia_smi_header_of_an_empty_gpu_is_not_another_process():
    assert prose_signals(SMI_EMPTY) == []


def test_ray_provisioning_is_not_vision():
    assert "prose-multimodal" not in prose_signals(RAY_MONITOR)


def test_empty_spec_decode_field_in_the_scheduler_dump_is_not_spec_decode():
    assert prose_signals(SCHEDULER_DUMP) == []


def test_dmesg_task_table_header_is_not_a_description_of_host_memory():
    assert prose_signals(DMESG_TABLE) == []


def test_a_reporters_sentence_is_still_read():
    text = "The memory keeps increasing until the pod is OOMKilled after a few hours of traffic."
    assert set(prose_signals(text)) >= {"prose-growth", "prose-host-memory"}


def test_empty_gpu_table_does_not_add_other_process_to_a_kv_failure():
    text = (
        "ERROR 06-01 10:00:00 [core.py:500] ValueError: No available memory for the cache blocks. Try "
        "increasing `gpu_memory_utilization` when initializing the engine.\n" + SMI_EMPTY
    )
    evidence = Evidence()
    read_one("evidence.txt", io.BytesIO(text.encode()), evidence)
    causes = diagnose(evidence).causes
    assert causes[0].cls == "kv-cache-insufficient-at-startup"
    # No rule evidence for another process (the learned prior may still list it: "from similar reports").
    assert all(c.from_prior for c in causes if c.cls == "other-process-or-shared-gpu")


# A docker image is software, not a picture (https://github.com/vllm-project/vllm/issues/10360,
# https://github.com/huggingface/text-generation-inference/issues/943); a vision model still is one
# (https://github.com/sgl-project/sglang/issues/8902).
DOCKER_IMAGE = (
    "docker run 0.6.4 image requires more GPU memory than version 0.6.3 to trigger OOM with the same "
    "settings."
)
MONITORED_FROM_THE_IMAGE = (
    "I also monitored the GPU memory usage from the moment I ran the docker image, and the memory occupancy "
    "for each GPU never exceeds 7%, yet the error occurs."
)
A_VISION_MODEL = (
    "When serving a vlm (qwen2.5-vl-3b/7b/32b in my cases). The GPU memory keeps increasing until it gets "
    "cuda out of memory for the coming request."
)


def test_a_docker_image_is_not_a_picture():
    assert "prose-multimodal" not in prose_signals(DOCKER_IMAGE)
    assert "prose-multimodal" not in prose_signals(MONITORED_FROM_THE_IMAGE)
    assert "prose-multimodal" in prose_signals(A_VISION_MODEL)


# https://github.com/unslothai/unsloth/issues/3542: vLLM's log quoted in an issue ("> " in front) is still the
# engine's line; a quoted sentence is still a sentence.
QUOTED_LOG = (
    "> INFO 11-01 23:47:29 [gpu_model_runner.py:3118] Graph capturing finished in 23 secs, took 2.28 GiB\n"
    "> INFO 11-01 23:47:30 [gpu_worker.py:391] Free memory on device (22.52/23.51 GiB) on startup. Desired "
    "GPU memory utilization is (0.8641841836125489, 20.32 GiB). Actual usage is 3.61 GiB for weight, "
    "0.59 GiB for peak activation, 0.02 GiB for non-torch memory, and 2.28 GiB for CUDAGraph memory.\n"
)


def test_a_quoted_log_line_is_no_sentence():
    assert prose_signals(QUOTED_LOG) == []
    text = "> The memory keeps increasing until the pod is OOMKilled after a few hours of traffic."
    assert "prose-growth" in prose_signals(text)
