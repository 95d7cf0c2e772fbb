"""Non-CUDA platforms' and smaller engines' memory texts read as typed facts: vllm-ascend's KV memory line,
Intel Gaudi's graph warm-up, XLA's allocator on TPUs, Intel XPU's per-allocation cap, MLC-LLM's memory parts.
Each text is real, from the public thread cited above it."""

from __future__ import annotations

from tests.diagnosis import pasted

import oomguard
from oomguard.diagnosis.evidence import Evidence, OomMessage, Signal, StartupNumber
from oomguard.units import GiB, MiB


def read(text: str) -> Evidence:
    return pasted.read(text, "evidence.log")


def the(evidence: Evidence, name: str) -> Signal:
    [s] = evidence.signals(name)
    return s


# https://github.com/vllm-project/vllm-ascend/issues/3843: every worker's profile left nothing for the KV
# cache.
ASCEND_NO_KV = """(Worker_TP2 pid=554) INFO 10-28 21:14:48 [worker_v1.py:259] Available memory: 0, total memory: 65452113920
(Worker_TP4 pid=556) INFO 10-28 21:14:48 [worker_v1.py:259] Available memory: 0, total memory: 65452113920
(EngineCore_DP0 pid=415) ERROR 10-28 21:14:49 [core.py:708] EngineCore failed to start.
"""  # noqa: E501


def test_vllm_ascend_with_no_kv_memory_is_the_kv_pool_at_startup():
    evidence = read(ASCEND_NO_KV)
    signals = evidence.signals("no-kv-cache-memory")  # one per worker that found none
    assert [(s.where.line, s.number("kv_available_bytes")) for s in signals] == [(1, 0), (2, 0)]
    totals = {n.value for n in evidence.of(StartupNumber) if n.quantity == "gpu_total_bytes"}
    assert totals == {65452113920}
    assert oomguard.diagnose(ASCEND_NO_KV).top == "kv-cache-insufficient-at-startup"


def test_vllm_ascend_with_kv_memory_left_is_only_a_number():
    text = "INFO 10-28 21:14:48 [worker_v1.py:259] Available memory: 21474836480, total memory: 65452113920\n"
    evidence = read(text)
    assert not evidence.signals("no-kv-cache-memory")
    kv = [n.value for n in evidence.of(StartupNumber) if n.quantity == "kv_available_bytes"]
    assert kv == [20 * GiB]


# https://github.com/HabanaAI/vllm-fork/issues/1194: the log stops inside the decode buckets' graph warm-up.
GAUDI_WARMUP = """INFO 05-02 12:09:01 hpu_model_runner.py:1730] [Warmup][Decode][203/416] batch_size:96 num_blocks:896 free_mem:14.93 GiB
(VllmWorkerProcess pid=614) INFO 05-02 12:09:46 hpu_model_runner.py:1730] [Warmup][Decode][204/416] batch_size:224 num_blocks:384 free_mem:14.93 GiB
INFO 05-02 12:09:46 hpu_model_runner.py:1730] [Warmup][Decode][204/416] batch_size:224 num_blocks:384 free_mem:14.93 GiB
"""  # noqa: E501


def test_gaudi_bucket_warm_up_is_the_graph_capture_step():
    evidence = read(GAUDI_WARMUP)
    assert [s.where.line for s in evidence.signals("milestone-cudagraph-start")] == [1]
    d = oomguard.diagnose(GAUDI_WARMUP)
    assert d.diagnosis.phase == "startup-cudagraph"
    assert d.top == "cuda-graph-capture"


def test_gaudi_warm_up_that_finished_is_past_the_capture():
    text = GAUDI_WARMUP + (
        "INFO 05-02 12:19:46 hpu_model_runner.py:1790] Warmup finished in 617 secs, allocated 14.19 GiB of "
        "device memory\n"
    )
    assert [s.where.line for s in read(text).signals("milestone-cudagraph-done")] == [4]


# https://github.com/vllm-project/vllm/pull/20644: the TPU's allocator with what it asked and what was free.
XLA_BUFFER = (
    "Bad StatusOr access: RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate "
    "896.00M. That was not possible. There are 295.08M free.; (0x0x0_HBM0)\n"
)


def test_xla_allocation_failure_gives_the_request_and_the_free_memory_in_binary_units():
    [oom] = read(XLA_BUFFER).of(OomMessage)
    assert (oom.requested, oom.free) == (896 * MiB, round(295.08 * MiB))


def test_xla_compiler_out_of_scratch_memory_is_not_a_device_allocation():
    # https://github.com/vllm-project/vllm/issues/8318: SMEM (a core's 1 MiB scalar memory) overflows while a
    # kernel compiles at a 16k context; no HBM was missing.
    text = (
        "> RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out "
        "of memory in memory space smem. Used 1.00M of 1.00M smem. Exceeded smem capacity by 1.7K.\n"
    )
    evidence = read(text)
    assert not evidence.of(OomMessage)
    assert oomguard.diagnose(text).top == "other"


def test_xla_compiler_out_of_hbm_is_the_device_running_out():
    # https://github.com/GoogleCloudPlatform/kubernetes-engine-samples/pull/1467: the same words for the
    # chip's HBM (a 405B model sharded over too few 16 GiB v5e chips) are the device's memory, not a core's
    # scratch.
    text = (
        "RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of "
        "memory in memory space hbm. Used 20.44G of 15.75G hbm. Exceeded hbm capacity by 4.70G.\n"
    )
    evidence = read(text)
    [oom] = evidence.of(OomMessage)
    assert (
        oom.total == round(15.75 * GiB) and oom.requested is None
    )  # the program's need is no one allocation
    assert not [s for s in evidence.of(Signal) if s.name == "platform-limit"]


# https://github.com/intel/ipex-llm/issues/12136: a 6.10 GiB tensor refused by the 4 GB cap with ~9.7 GiB of
# the card unreserved.
XPU_CAP = (
    "RuntimeError: Current platform can NOT allocate memory block with size larger than 4GB! Tried to "
    "allocate 6.10 GiB (GPU  0; 15.11 GiB total capacity; 4.84 GiB already allocated; 5.41 GiB reserved "
    "in total by PyTorch)\n"
)


def test_intel_single_allocation_cap_with_the_memory_free_is_not_the_device_running_out():
    evidence = read(XPU_CAP)
    assert the(evidence, "platform-limit").number("limit_bytes") == 4 * GiB
    assert oomguard.diagnose(XPU_CAP).top == "other"


def test_intel_single_allocation_cap_beyond_the_whole_device_is_still_the_step():
    # https://github.com/intel/ipex-llm/issues/11798: SDPA asks 40 GiB of a 15.11 GiB card.
    text = XPU_CAP.replace("6.10 GiB (GPU", "40.00 GiB (GPU")
    assert oomguard.diagnose(text).top == "activation-peak"


# https://github.com/mlc-ai/mlc-llm/issues/2239 (maintainer: reduce the prefill chunk size): the message
# blames the weights; the parts say the prefill chunk's temporary buffer took the memory.
MLC_PARTS = """Cannot estimate KV cache capacity. The model weight size {params_bytes} may be larger than GPU memory size {gpu_size_bytes}
temp_func_bytes: 21852323840
kv_aux_workspace_bytes: 591666136
model_workspace_bytes: 268894528
logit_processor_workspace_bytes: 195999040.0
kv_bytes_per_token: 196609.25
"""  # noqa: E501


def test_mlc_llm_largest_memory_part_is_what_left_no_kv():
    evidence = read(MLC_PARTS)
    s = the(evidence, "prefill-tokens-dont-fit")
    assert (s.where.line, s.number("temp_func_bytes")) == (1, 21852323840)
    assert oomguard.diagnose(MLC_PARTS).top == "activation-peak"
    weights = MLC_PARTS.replace("temp_func_bytes: 21852323840", "params_bytes: 21852323840")
    assert [s.name for s in read(weights).signals("load-model-failed")] == ["load-model-failed"]
