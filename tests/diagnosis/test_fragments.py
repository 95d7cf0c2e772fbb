"""Short pasted fragments and messages of other years and wrappers: each gets an answer, read by the
quantities it carries. Texts are real (sources cited); prefixes and wrapping kept as pasted."""

from __future__ import annotations

import io

import pytest
from tests.diagnosis.pasted import ranked

from oomguard.diagnosis.evidence import Evidence, OomMessage
from oomguard.diagnosis.read import read_one
from oomguard.diagnosis.sources import allocator
from oomguard.errors import InputFormatError
from oomguard.units import GiB, MiB


def oom(text: str) -> OomMessage:
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(text.encode()), evidence)
    return evidence.of(OomMessage)[0]


# https://github.com/vllm-project/vllm/issues/783 (PyTorch 2.0 format; other processes held ~15 GB).
OLD_FORMAT = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.63 GiB (GPU 0; 44.56 GiB total "
    "capacity; 27.91 GiB already allocated; 565.31 MiB free; 27.93 GiB reserved in total by PyTorch) If "
    "reserved "
    "memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation "
    "for "
    "Memory Management and PYTORCH_CUDA_ALLOC_CONF"
)
# https://github.com/nlzy/vllm-gfx906/issues/14 (ROCm).
HIP = (
    "HIP out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of 15.98 GiB of which 22.00 "
    "MiB "
    "is free. Of the allocated memory 15.69 GiB is allocated by PyTorch, and 92.65 MiB is reserved by "
    "PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_HIP_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)
# https://github.com/vllm-project/vllm/issues/2140 (PyTorch 2.1 spelled it "capacty").
CAPACTY = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 0 has a total capacty "
    "of "
    "23.69 GiB of which 3.09 GiB is free. Including non-PyTorch memory, this process has 20.57 GiB memory in "
    "use. "
    "Of the allocated memory 20.13 GiB is allocated by PyTorch, and 755.50 KiB is reserved by PyTorch but "
    "unallocated."
)
# https://github.com/studio-dots-ai/dots.ocr/issues/196: one allocation larger than the device.
LARGER_THAN_DEVICE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 74.16 GiB. GPU 0 has a total capacity of "
    "44.40 GiB of which 29.89 GiB is free. Process 2684311 has 14.51 GiB memory in use. Of the allocated "
    "memory "
    "13.44 GiB is allocated by PyTorch, and 738.96 MiB is reserved by PyTorch but unallocated."
)
# https://github.com/huggingface/text-generation-inference/issues/755 (TGI's warm-up).
TGI = (
    'Error: Warmup(Generation("Not enough memory to handle 4096 prefill tokens. You need to decrease '
    '`--max-batch-prefill-tokens`"))'
)
# https://github.com/vllm-project/vllm/issues/1160 (Ray's raylet, as pasted).
RAY_RAYLET = (
    "(raylet) [DATE] (raylet) node_manager.cc:3007: 2 Workers (tasks / actors) killed due to memory pressure "
    "(OOM), 0 Workers crashed due to other reasons at node (ID: abd406d4, IP: 10.0.167.26) over the last "
    "time "
    "period."
)
# https://github.com/gpustack/gpustack/issues/2489: frames only (the V0 profile run), no error line kept.
FRAMES_ONLY = """\
  File "/usr/local/lib/python3.10/dist-packages/vllm/worker/worker.py", line 249, in determine_num_available_blocks
    self.model_runner.profile_run()
  File "/usr/local/lib/python3.10/dist-packages/vllm/worker/model_runner.py", line 1252, in profile_run
    self._dummy_run(max_num_batched_tokens, max_num_seqs)
  File "/usr/local/lib/python3.10/dist-packages/vllm/worker/model_runner.py", line 1378, in _dummy_run
    self.execute_model(model_input, kv_caches, intermediate_tensors)
"""  # noqa: E501
# vLLM's sleep-mode line (format from https://github.com/vllm-project/vllm/issues/17117), three RL cycles.
SLEEP_CYCLES = """\
INFO 04-23 16:21:37 [worker.py:145] Sleep mode freed 19.51 GiB memory, 26.31 GiB memory is still in use.
INFO 04-23 16:41:37 [worker.py:145] Sleep mode freed 19.51 GiB memory, 29.02 GiB memory is still in use.
INFO 04-23 17:01:37 [worker.py:145] Sleep mode freed 19.51 GiB memory, 31.77 GiB memory is still in use.
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.
"""


def test_old_format_is_read_by_its_quantities():
    o = oom(OLD_FORMAT)
    assert o.flavor == "torch-old"
    assert o.requested == round(1.63 * GiB) and o.total == round(44.56 * GiB)
    assert o.allocated == round(27.91 * GiB) and o.free == round(565.31 * MiB)
    assert o.reserved_unallocated == round(27.93 * GiB) - round(27.91 * GiB)


def test_old_format_memory_outside_pytorch_is_another_process():
    # 44.56 total - 0.55 free - 27.93 reserved = 16 GiB that this process's PyTorch does not hold.
    assert ranked(OLD_FORMAT)[0] == "other-process-or-shared-gpu"


def test_hip_message_is_the_same_reader():
    o = oom(HIP)
    assert (o.requested, o.free) == (64 * MiB, 22 * MiB)
    assert o.total == round(15.98 * GiB) and o.reserved_unallocated == round(92.65 * MiB)


def test_misspelled_capacity_of_pytorch_2_1_is_read():
    o = oom(CAPACTY)
    assert o.total == round(23.69 * GiB) and o.this_process == round(20.57 * GiB)


def test_an_allocation_larger_than_the_device_is_a_step_shape_not_sharing():
    causes = ranked(LARGER_THAN_DEVICE)
    assert causes[0] == "activation-peak"
    assert "other-process-or-shared-gpu" not in causes[:2] and "fragmentation" not in causes[:3]


def test_tgi_prefill_warmup_is_an_activation_peak():
    assert ranked(TGI)[0] == "activation-peak"


def test_ray_raylet_memory_pressure_is_host_ram():
    assert ranked(RAY_RAYLET)[0] == "host-ram-oom"


def test_frames_alone_get_the_phase_they_show():
    assert ranked(FRAMES_ONLY)[0] == "activation-peak"


def test_sleep_residual_growing_across_cycles_is_a_leak():
    assert ranked(SLEEP_CYCLES)[0] == "memory-leak"


@pytest.mark.parametrize(
    "text",
    [
        "RuntimeError: CUDA error: out of memory",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "[TensorRT-LLM][ERROR] CUDA runtime error in cudaMalloc(&ptr, n): out of memory",
        "torch.OutOfMemoryError: CUDA out of memory.",
        "ValueError: something the engine did not expect",
    ],
)
def test_every_failure_signal_gets_an_answer(text: str):
    assert ranked(text)


def test_text_with_no_failure_signal_is_still_refused():
    with pytest.raises(InputFormatError):
        ranked("hello world, this is a note about lunch\nand another line\n")


def test_outside_pytorch_is_total_minus_free_minus_reserved():
    report = allocator.read(OLD_FORMAT)
    assert report is not None
    assert allocator.outside_pytorch(report) == round(44.56 * GiB) - round(565.31 * MiB) - round(27.93 * GiB)


# https://github.com/sgl-project/sglang/issues/5285 (SGLang wraps the OOM of its graph capture).
SGLANG_CAPTURE = """\
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 934, in init_cuda_graphs
    self.cuda_graph_runner = CudaGraphRunner(self)
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 269, in __init__
    raise Exception(
Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 7 has a total capacity of 95.00
"""  # noqa: E501
# https://github.com/sgl-project/sglang/issues/4205: the same wrapper around a network error is not memory.
SGLANG_CAPTURE_GLOO = "Exception: Capture cuda graph failed: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed"  # noqa: E501


def test_sglang_capture_failure_with_an_oom_is_cuda_graph_capture():
    assert ranked(SGLANG_CAPTURE)[0] == "cuda-graph-capture"


def test_sglang_capture_failure_without_memory_is_not_cuda_graph_memory():
    assert ranked(SGLANG_CAPTURE_GLOO)[0] != "cuda-graph-capture"


# https://github.com/vllm-project/vllm/issues/17117: vLLM at 0.25 of the GPU next to DeepSpeed training.
SLEEP_NEXT_TO_TRAINING = """\
INFO 04-23 16:13:24 [worker.py:287] the current vLLM instance can use total_gpu_memory (79.14GiB) x \
gpu_memory_utilization (0.25) = 19.78GiB
INFO 04-23 16:21:37 [worker.py:145] Sleep mode freed 19.51 GiB memory, 26.31 GiB memory is still in use.
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.
"""


def test_memory_left_after_sleep_beyond_vllms_budget_is_another_process():
    assert ranked(SLEEP_NEXT_TO_TRAINING)[0] == "other-process-or-shared-gpu"
