"""Quantities and typed setup facts decide the cause where words would not (issue 8, points 3 and 4): the
memory the device's own numbers leave to other processes, the step a stack was executing after the KV pool
was sized, and an allocation no text layer makes in a multimodal deployment. Texts are real, pasted as in
the cited public threads."""

from __future__ import annotations

import io

from oomguard.diagnose.diagnosis import diagnose
from oomguard.diagnose.evidence import Evidence
from oomguard.diagnose.read import read_one, require_evidence

ALLOC_TAIL = (
    " If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
    "See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


def ranked(text: str) -> list[str]:
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(text.encode()), evidence)
    require_evidence(evidence)
    return [c.cls for c in diagnose(evidence).causes]


# https://github.com/ai-dynamo/dynamo/issues/1492: a worker lands on a GPU another job fills. Inside its
# container no other pid is listed, but 79.20 - 0.05 free - 2.46 of its own = 76.7 GiB is someone else's.
WORKER_ON_A_FULL_GPU = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of "
    "79.20 GiB of which 48.62 MiB is free. Including non-PyTorch memory, this process has 2.46 GiB memory in "
    "use. Of the allocated memory 1.15 GiB is allocated by PyTorch, and 13.45 MiB is reserved by PyTorch but "
    "unallocated." + ALLOC_TAIL + "\n"
    "Loading safetensors checkpoint shards:  13% Completed | 2/15 [00:01<00:11,  1.12it/s]"
)
# https://github.com/vllm-project/vllm/issues/12529: a 7.75 GiB laptop GPU; the 1.56 GiB its own process
# does not hold is a desktop's display and contexts, not a tenant: the sampler warm-up stays first.
SAMPLER_ON_A_LAPTOP = (
    "ERROR 03-13 09:07:24 [core.py:330]   File "
    '"/home/gaocegege/code/vllm/vllm/v1/worker/gpu_worker.py", line 157, in determine_available_memory\n'
    "ERROR 03-13 09:07:24 [core.py:330]     self.model_runner.profile_run()\n"
    "ERROR 03-13 09:07:24 [core.py:330]   File "
    '"/home/gaocegege/code/vllm/vllm/v1/worker/gpu_model_runner.py", line 1392, in profile_run\n'
    "ERROR 03-13 09:07:24 [core.py:330]     sampler_output = self._dummy_sampler_run(hidden_states)\n"
    "ERROR 03-13 09:07:24 [core.py:330]   File "
    '"/home/gaocegege/code/vllm/vllm/v1/worker/gpu_model_runner.py", line 1291, in _dummy_sampler_run\n'
    "ERROR 03-13 09:07:24 [core.py:330]     sampler_output = self.model.sample(logits=logits,\n"
    "ERROR 03-13 09:00:43 [core.py:330] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 "
    "GiB. GPU 0 has a total capacity of 7.75 GiB of which 1.17 GiB is free. Including non-PyTorch memory, "
    "this process has 5.02 GiB memory in use. Of the allocated memory 4.81 GiB is allocated by PyTorch, and "
    "18.97 MiB is reserved by PyTorch but unallocated." + ALLOC_TAIL + "\n"
)
# https://github.com/sgl-project/sglang/issues/6027: the KV pool was sized at startup; weeks later a request's
# forward pass fails. The last startup line is not where it failed: the request's step on the stack is.
REQUEST_AFTER_KV_SIZED = (
    "[2025-05-05 03:55:08 TP0] KV Cache is allocated. #tokens: 274934, KV size: 17.99 GB\n"
    "However, a single 64k-length input can consistently cause the server to crash due to OOM on my "
    "H100*8*2 environment.\n"
    "[2025-07-07 19:00:30 DP4 TP4] TpModelWorkerClient hit an exception: Traceback (most recent call last):\n"
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker_overlap_thread.py", line 127, in '
    "forward_thread_func\n"
    "    self.forward_thread_func_()\n"
    '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1199, in '
    "forward_extend\n"
    "    return self.model.forward("
)
# https://github.com/MoonshotAI/Kimi-VL/issues/54: 1,029 GiB asked on a 79 GiB device by a model served as
# kimi-vl with 64 images per prompt: the vision tower's attention without flash-attn.
VISION_ATTENTION_LARGER_THAN_DEVICE = (
    "vllm serve /root/model/kimi --served-model-name kimi-vl-thinking-2506 --trust-remote-code "
    "--tensor-parallel-size 8 --max-num-batched-tokens 32768 --max-model-len 32768 --limit-mm-per-prompt "
    "image=64\n\n"
    "RuntimeError: Worker failed with error 'CUDA out of memory. Tried to allocate 1029.51 GiB. GPU 0 has a "
    "total capacity of 79.35 GiB of which 19.23 GiB is free. Process 145882 has 60.12 GiB memory in use. Of "
    "the allocated memory 58.52 GiB is allocated by PyTorch, and 310.01 MiB is reserved by PyTorch but "
    "unallocated." + ALLOC_TAIL + "', please check the stack trace above for the root cause"
)
# https://github.com/OpenBMB/MiniCPM-V/issues/640: a vision model's startup OOM that no frame places.
VISION_MODEL_UNPLACED_OOM = (
    "vllm serve /docker_storage/models/MiniCPM-V-2_6 --dtype auto --max-model-len 2048 "
    "--gpu_memory_utilization 1 --trust-remote-code\n\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of "
    "22.18 GiB of which 3.47 GiB is free. Process 8007 has 18.71 GiB memory in use. Of the allocated memory "
    "18.29 GiB is allocated by PyTorch, and 142.04 MiB is reserved by PyTorch but unallocated." + ALLOC_TAIL
)
# The same allocation in a text-only deployment: no encoder to blame.
TEXT_ONLY_LARGER_THAN_DEVICE = VISION_ATTENTION_LARGER_THAN_DEVICE.replace(
    "--served-model-name kimi-vl-thinking-2506 ", ""
).replace(" --limit-mm-per-prompt image=64", "")


def test_memory_the_device_numbers_leave_to_unlisted_processes_is_another_process() -> None:
    assert ranked(WORKER_ON_A_FULL_GPU)[0] == "other-process-or-shared-gpu"


def test_a_desktops_display_memory_is_no_tenant() -> None:
    causes = ranked(SAMPLER_ON_A_LAPTOP)
    assert causes[0] == "sampler-or-logits"
    assert "other-process-or-shared-gpu" not in causes[:2]


def test_a_requests_step_after_the_kv_pool_was_sized_is_runtime() -> None:
    causes = ranked(REQUEST_AFTER_KV_SIZED)
    assert causes[0] == "activation-peak"
    assert "cuda-graph-capture" not in causes[:3]


def test_an_allocation_larger_than_the_device_in_a_multimodal_deployment_is_the_encoder() -> None:
    assert ranked(VISION_ATTENTION_LARGER_THAN_DEVICE)[0] == "multimodal-encoder"
    assert ranked(TEXT_ONLY_LARGER_THAN_DEVICE)[0] == "activation-peak"


def test_an_unplaced_oom_of_a_vision_model_is_its_encoder_first() -> None:
    assert ranked(VISION_MODEL_UNPLACED_OOM)[0] == "multimodal-encoder"
