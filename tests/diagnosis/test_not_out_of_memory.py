"""Failures that look like running out of memory and are not: a size or offset past a 32-bit limit, a kernel
touching memory outside its allocations. Each mechanism is read from the text its own check or platform
prints (real text, sources cited above it), and a near miss of another class is not taken for it."""

from __future__ import annotations

import io

import oomguard
from oomguard.diagnosis.evidence import Evidence
from oomguard.diagnosis.read import read_one


def top(text: str) -> str:
    return str(oomguard.diagnose(text).top)


def signals(text: str) -> list[str]:
    evidence = Evidence()
    read_one("evidence.log", io.BytesIO(text.encode()), evidence)
    return [s.name for s in evidence.signals()]


# --- 32-bit limits stated by the check that refused the size ------------------------------------------------

# PyTorch aten/src/ATen/core/TensorBase.h (packed_accessor32, v2.x): the TORCH_CHECK's message as raised.
PACKED_ACCESSOR32 = (
    "RuntimeError: numel needs to be smaller than int32_t max; otherwise, please use packed_accessor64\n"
)

# ik_llama.cpp serving DeepSeek-V3.1 at a 112,640-token context with -ub 8192 (a public issue thread quoting
# the server's output); the assert is llama.cpp's ggml/src/ggml-cuda/cpy.cu ggml_cuda_cpy.
GGML_CPY_INT_MAX = (
    'INFO [            update_slots] kv cache rm [p0, end) | tid="140371140771840" timestamp=1755874518 '
    "id_slot=0 id_task=0 p0=57344\n"
    "/mnt/home_extend/llm/ik_llama/1708/ik_llama.cpp/ggml/src/ggml-cuda/cpy.cu:380: "
    "GGML_ASSERT(ggml_nbytes(src0) <= INT_MAX) failed\n"
)

# Triton's overflow sanitizer (python/triton/language/semantic.py binary_op_sanitize_overflow_impl, emitted
# when TRITON_DEBUG=1): the device assert it compiles in.
TRITON_SANITIZER = "Assertion `int32 overflow detected for operation mul` failed\n"

# https://github.com/lufficc/SSD/issues/222: a size computed in 32 bits wrapped below zero.
WRAPPED_NEGATIVE_SIZE = (
    "RuntimeError: Trying to create tensor with negative dimension -1567888768: [-1567888768]\n"
)

# https://github.com/InternLM/lmdeploy/issues/1362: LMDeploy's PyTorch engine sizing its KV blocks from a
# memory budget that went negative: a small negative count, no wrapped product.
NEGATIVE_BLOCK_COUNT = (
    "RuntimeError: Trying to create tensor with negative dimension -56: [-56, 8, 20, 128]\n"
)


def test_pytorch_32bit_accessor_check_is_int32_overflow():
    assert top(PACKED_ACCESSOR32) == "int32-index-overflow"


def test_ggml_int_max_assert_is_int32_overflow():
    assert top(GGML_CPY_INT_MAX) == "int32-index-overflow"


def test_triton_overflow_sanitizer_is_int32_overflow():
    assert top(TRITON_SANITIZER) == "int32-index-overflow"


def test_a_size_wrapped_past_2_31_is_int32_overflow():
    assert top(WRAPPED_NEGATIVE_SIZE) == "int32-index-overflow"


def test_a_small_negative_block_count_is_not_int32_overflow():
    assert top(NEGATIVE_BLOCK_COUNT) != "int32-index-overflow"


# --- a kernel touching memory outside its allocations, in each platform's words -----------------------------

# https://github.com/ROCm/legacy-rocm-build/issues/6157: vLLM 0.19 on a Radeon 8060S (gfx1151), the ROCR
# runtime's fault report.
ROCM_FAULT = """\
Memory access fault by GPU node-1 (Agent handle: 0x58935a90) on address 0x7fbe6a804000. Reason: Page not present or supervisor privilege.
HW Exception by GPU node-1 (Agent handle: 0x5b522e50) reason :GPU Hang
./start.sh: line 22:  5255 Aborted                    (core dumped) vllm serve amd/gpt-oss-120b-w-mxfp4-a-fp8 --max-model-len 65332 --gpu-memory-utilization 0.8
"""  # noqa: E501

# https://github.com/vllm-project/vllm-xpu-kernels/pull/445: an Intel GPU's page fault, as the kernel driver
# reports it to the Level Zero program.
XPU_FAULT = """\
Segmentation fault from GPU at 0xff00000b65ba2000, ctx_id: 1 (CCS)
  type: 0 (NotPresent), level: 2 (PDP), access: 0 (Read), banned: 1, aborting.
"""

# https://github.com/syv-ai/qwen38-27b-rtx3090/issues/86: the NVIDIA kernel driver's Xid 31 (a GPU memory page
# fault) under the CUDA error.
XID_31 = """\
torch.AcceleratorError: CUDA error: an illegal memory access was encountered
NVRM: Xid (PCI:0000:01:00): 31, ... MMU Fault: ENGINE GRAPHICS GPC0 ... FAULT_PDE ACCESS_TYPE_VIRT_READ
"""

# leptonai/gpud components/query/log/xid (its example of the driver's line): Xid 79, the GPU fell off the
# bus: a hardware or link failure, no address a kernel computed.
XID_79 = "NVRM: Xid (PCI:0000:05:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"


def test_rocm_memory_access_fault_is_read_as_a_kernel_fault():
    assert top(ROCM_FAULT) == "int32-index-overflow"


def test_intel_gpu_page_fault_is_read_as_a_kernel_fault():
    assert top(XPU_FAULT) == "int32-index-overflow"


def test_nvidia_xid_31_is_read_as_a_kernel_fault():
    assert top(XID_31.splitlines()[1] + "\n") == "int32-index-overflow"


def test_nvidia_xid_79_is_no_kernel_fault():
    assert "illegal-memory-access" not in signals(XID_79)


# --- the reporter's words for a 32-bit overflow -------------------------------------------------------------

# https://github.com/ROCm/aiter/pull/4474: the offset overflowed; the words name no width.
AITER_MULTIPLICATION = (
    "For a >2GB cache this multiplication overflows, and the overflowed offset is added to the 64-bit base "
    "pointer in the `global_load` fallback, producing an out-of-bounds pointer and a segfault.\n"
)

# https://github.com/lightseekorg/tokenspeed/pull/530: the fix, said as its title.
TOKENSPEED_FIX = "fix(attention): use int64 paged-KV addressing in MHA Triton kernels\n"

# https://github.com/sgl-project/sglang/pull/6318 and https://github.com/ggml-org/llama.cpp/issues/18111:
# "overflow" as people say it of memory, no integer in it.
MEMORY_OVERFLOW = (
    "For these retracted requests, if log probabilities (logp) are needed, recomputing them during "
    "prefilling would require gathering logits to calculate logp, leading to GPU memory overflow.\n"
    "I assume the vision stack is loaded lazily, and cannot overflow to system ram;\n"
)


def test_an_offset_that_overflows_in_a_reporters_words_is_int32_overflow():
    assert "prose-int32" in signals(AITER_MULTIPLICATION)
    assert top(AITER_MULTIPLICATION) == "int32-index-overflow"


def test_widening_to_int64_in_words_is_int32_overflow():
    assert "prose-int32" in signals(TOKENSPEED_FIX)


def test_memory_that_overflows_is_no_integer_overflow():
    assert "prose-int32" not in signals(MEMORY_OVERFLOW)
    assert top(MEMORY_OVERFLOW) != "int32-index-overflow"


# https://github.com/vllm-project/vllm/pull/50220 (its worked example, a code block, not a sentence): the
# limit by value in the arithmetic.
ROW_OFFSET_ARITHMETIC = "ceil(2^31 / 40960) = 52429\n"


def test_the_limit_by_value_in_arithmetic_is_int32_overflow():
    assert "int32-index-math" in signals(ROW_OFFSET_ARITHMETIC)


# --- a GPU API's cap on one allocation ----------------------------------------------------------------------

# https://github.com/ggml-org/llama.cpp/issues/12728: the compute buffer asked more than Vulkan's
# maxMemoryAllocationSize, with memory free on the GPU ("I do have memory on GPU").
VULKAN_CAP = """\
init:    Vulkan0 KV buffer size = 13800.00 MiB
llama_context: KV self size  = 13800.00 MiB, K (q8_0): 6120.00 MiB, V (f16): 7680.00 MiB
ggml_vulkan: Device memory allocation of size 2166360064 failed.
ggml_vulkan: Requested buffer size exceeds device memory allocation limit: ErrorOutOfDeviceMemory
ggml_gallocr_reserve_n: failed to allocate Vulkan0 buffer of size 2166360064
llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers
"""

# llama.cpp's Vulkan backend when the driver itself has no memory left (ggml-vulkan.cpp prints what
# vk::Device::allocateMemory threw): a KV cache too large for an 8 GB iGPU share, the context's failure.
VULKAN_OUT_OF_MEMORY = """\
llama_new_context_with_model: n_ctx      = 32768
ggml_vulkan: Device memory allocation of size 1879048192 failed.
ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory
llama_kv_cache_init: failed to allocate buffer for kv cache
llama_new_context_with_model: llama_kv_cache_init() failed for self-attention cache
"""

# wgpu-core's CreateBufferError::MaxBufferSize (WebGPU's maxBufferSize), as a wgpu program reported it.
WEBGPU_CAP = """\
Caused by:
  In Device::create_buffer
    Buffer size 1073741824 is greater than the maximum buffer size (268435456)
"""


def test_vulkan_allocation_limit_is_a_platform_cap_not_the_context():
    first = oomguard.diagnose(VULKAN_CAP).diagnosis.causes[0]
    assert first.cls == "other"
    assert "per-allocation cap" in first.explanation
    assert any("smaller" in f.summary for f in first.fixes)


def test_vulkan_device_out_of_memory_is_no_cap():
    assert "platform-limit" not in signals(VULKAN_OUT_OF_MEMORY)
    assert top(VULKAN_OUT_OF_MEMORY) == "max-model-len-exceeds-kv"


def test_webgpu_max_buffer_size_is_a_platform_cap():
    assert top(WEBGPU_CAP) == "other"


# --- an attention library's fixed workspace -----------------------------------------------------------------

# https://github.com/vllm-project/vllm/issues/40023: at --max-num-seqs 528 the prefill's temporary buffer
# outgrows FlashInfer's workspace (vLLM's VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE) during graph capture.
FLASHINFER_WORKSPACE = """RuntimeError: Error in function 'aligned_alloc' at /workspace/include/flashinfer/allocator.h:49:
  Buffer overflow when allocating memory for batch_prefill_tmp_v
  with size 536346624 and alignment 16,
  but only 413138944 bytes available in AlignedAllocator.
  Increase the workspace buffer size.
"""  # noqa: E501


def test_a_kernels_buffer_past_the_attention_workspace_is_not_the_gpu():
    assert "workspace-too-small" in signals(FLASHINFER_WORKSPACE)
    diagnosis = oomguard.diagnose(FLASHINFER_WORKSPACE)
    assert diagnosis.top == "other"
    assert "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE" in diagnosis.causes[0].fixes[0].summary
    # https://github.com/sgl-project/sglang/issues/2102: FlashInfer's earlier wording, under SGLang.
    sglang = (
        "RuntimeError: Failed to allocate memory for batch_prefill_tmp_v with size 435814400 and alignment "
        "16 in AlignedAllocator\n"
    )
    assert top(sglang) == "other"


def test_the_gpu_refusing_the_workspace_itself_is_memory():
    # The workspace buffer's own allocation (vLLM's torch.empty of the workspace size) failing is the GPU's
    # memory, not a workspace too small.
    text = (
        "    workspace_buffer = torch.empty(envs.VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE, dtype=torch.uint8)\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 394.00 MiB.\n"
    )
    assert "workspace-too-small" not in signals(text)
    assert top(text) != "other"


# --- device errors that are not a lack of memory ------------------------------------------------------------

# https://github.com/sgl-project/sglang/issues/6001 (its title): a Triton kernel's shared memory per block
# past the MI308's.
TRITON_SHARED_MEMORY = (
    "[Bug] OutOfResources: out of resource: shared memory, Required: 196608, Hardware limit: 65536 when run "
    "deepseek-r1 on sglang 0.4.6 with AMD Mi308\n"
)

# cudaGetErrorString(cudaErrorNoKernelImageForDevice) as PyTorch raises it (c10/cuda/CUDAException.h appends
# the asynchronous-report hint).
NO_KERNEL_IMAGE = """\
RuntimeError: CUDA error: no kernel image is available for execution on the device
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
"""  # noqa: E501

# The same PyTorch wording around cudaErrorMemoryAllocation: the device did run out.
CUDA_RUNTIME_OOM = """\
RuntimeError: CUDA error: out of memory
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
"""  # noqa: E501


def test_a_kernel_past_the_shared_memory_per_block_is_a_platform_limit():
    first = oomguard.diagnose(TRITON_SHARED_MEMORY).diagnosis.causes[0]
    assert first.cls == "other"
    assert any("num_stages" in f.summary for f in first.fixes)


def test_no_kernel_image_for_the_gpu_is_not_memory():
    first = oomguard.diagnose(NO_KERNEL_IMAGE).diagnosis.causes[0]
    assert first.cls == "other"
    assert "not a lack of memory" in first.explanation


def test_cuda_runtime_out_of_memory_is_no_device_error():
    assert "device-error" not in signals(CUDA_RUNTIME_OOM)
    assert top(CUDA_RUNTIME_OOM) != "other"


# https://github.com/sgl-project/sglang/issues/4717: the memory saver's pool meets a graph capture in
# PyTorch's caching allocator (pytorch/pytorch#145168), quoted in backticks inside the reporter's sentence.
INTERNAL_ASSERT = (
    "The error is \n"
    '`RuntimeError: captures_underway.empty() INTERNAL ASSERT FAILED at "../c10/cuda/CUDACachingAllocator.cpp'
    '":2967; please report a bug to PyTorch. `\n'
)


def test_pytorchs_internal_assert_is_a_framework_bug_not_memory():
    assert "internal-assert" in signals(INTERNAL_ASSERT)
    assert top(INTERNAL_ASSERT) == "other"


def test_a_python_assert_is_no_internal_assert():
    # https://github.com/vllm-project/vllm/issues/29168: the engine's own assert statement, not PyTorch's
    text = '`assert cpu_tensor.is_pinned(), "CPU tensor must be pinned"`\n'
    assert "internal-assert" not in signals(text)


# --- a wrapper that guesses memory ------------------------------------------------------------------------

# https://github.com/vllm-project/vllm-openvino/issues/19: the profile run's wrapper blames memory for a
# KeyError (a text-only model looked up in the multimodal registry).
OPENVINO_KEYERROR = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "/usr/local/lib/python3.10/dist-packages/vllm_openvino/worker/openvino_worker.py", line 274, in determine_num_available_blocks
[rank0]:     kv_cache_size = self.profile_run()
[rank0]:   File "/usr/local/lib/python3.10/dist-packages/vllm_openvino/worker/openvino_worker.py", line 532, in profile_run
[rank0]:     model_profile_run()
[rank0]:   File "/usr/local/lib/python3.10/dist-packages/vllm/multimodal/registry.py", line 99, in __getitem__
[rank0]:     raise KeyError(msg) from exc
[rank0]: KeyError: 'Cannot find `mm_limits` for model=/ai-data/ai-models/Baichuan2-7B-Base. Did you forget to call `init_mm_limits_per_prompt`?'

RuntimeError: The error occurred during profile run. This might be due to insufficient GPU memory.
"""  # noqa: E501

# The same wrapper over PyTorch's allocator message (its format as in test_causes): memory did run out.
WRAPPED_REAL_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.19 GiB of which 1.50 GiB is free.\n"
    "RuntimeError: The error occurred during profile run. This might be due to insufficient GPU memory.\n"
)


def test_a_wrappers_memory_guess_over_a_keyerror_is_not_memory():
    first = oomguard.diagnose(OPENVINO_KEYERROR).diagnosis.causes[0]
    assert first.cls == "other"
    assert "wrapper's guess" in first.explanation


def test_the_same_wrapper_over_an_allocator_oom_is_memory():
    assert "misreported-oom" not in signals(WRAPPED_REAL_OOM)
    assert top(WRAPPED_REAL_OOM) != "other"


# --- a KV offload connector's own pool --------------------------------------------------------------------

# https://github.com/LMCache/LMCache/issues/1337: LMCache's NIXL transfer buffer full on the prefiller.
LMCACHE_NIXL_FULL = """\
[2025-08-14 14:57:51,765] LMCache WARNING: Failed to allocate memory object, retrying... (nixl_connector_v3.py:567:lmcache.v1.storage_backend.connector.nixl_connector_v3)
[2025-08-14 14:57:51,765] LMCache DEBUG: Failed to allocate memory for tensor(torch.Size([2, 28, 256, 1024]), torch.bfloat16) because no free blocks is available (memory_management.py:992:lmcache.v1.memory_management)
"""  # noqa: E501


def test_an_offload_connectors_full_pool_is_not_the_gpu():
    first = oomguard.diagnose(LMCACHE_NIXL_FULL).diagnosis.causes[0]
    assert first.cls == "other"
    assert "connector" in first.explanation


def test_the_engines_own_kv_pool_running_dry_is_no_connector_pool():
    from tests.diagnosis.test_engine_readers import TGI_BLOCKS

    assert "offload-pool-full" not in signals(TGI_BLOCKS)


# --- a kernel fault and a launch limit in the reporter's words --------------------------------------------

# https://github.com/vllm-project/vllm/issues/48266 (its title): the fault in words.
ROCM_FAULT_TITLE = (
    "[Bug][ROCm/gfx942] GPU memory access fault (worker crash) when sequences cross 2048 tokens — "
    "DeepSeek V4 flash arch, sparse_attn_indexer + fp8 KV cache, MI325X TP=4\n"
)

# https://github.com/sgl-project/sglang/issues/7545: the same fault, explained by a grid past 65,535 rows.
GRID_PAST_LIMIT = (
    "When I run Qwen3-235B-A22B model, and enable DP+TP+EP,  it will memory access fault.\n"
    "...I found this issue is caused by triton kernel **pre_reorder_triton_kernel**. In this kernel the grid "
    "is set by hindden_states.shape[0], here is 92029. The unit test is also wrong for batch size > 65536.\n"
)

# https://github.com/vllm-project/vllm/issues/50427 (its title): offsets past 2^31, no grid limit.
FLEX_OFFSETS_TITLE = (
    "[Bug]: FlexAttention paged K/V offsets overflow int32 once `num_gpu_blocks ≥ 2**31 / (block_size · 2 · "
    "num_kv_heads · head_size)` — crash *or* silent wrong output\n"
)


def test_a_memory_access_fault_in_words_is_read_as_a_kernel_fault():
    assert "prose-kernel-fault" in signals(ROCM_FAULT_TITLE)
    assert top(ROCM_FAULT_TITLE) == "int32-index-overflow"


def test_a_grid_past_the_launch_limit_is_the_platform_not_an_offset():
    assert top(GRID_PAST_LIMIT) == "other"


def test_offsets_past_2_31_are_no_launch_limit():
    assert "prose-launch-limit" not in signals(FLEX_OFFSETS_TITLE)
    assert top(FLEX_OFFSETS_TITLE) == "int32-index-overflow"


# --- NCCL's result codes; NumPy's int32 bound ---------------------------------------------------------------

# https://github.com/vllm-project/vllm/issues/25597: NCCL's result code after its own buffer allocation
# failed (the EngineCore's lines, without PyTorch's "NCCL error" wrapper).
NCCL_INTERNAL = """\
(EngineCore_DP4 pid=1675) ncclInternalError: Internal check failed.
(EngineCore_DP4 pid=1675) Last error:
(EngineCore_DP4 pid=1675) ncclProxyClientGetFd call to tpRank 7 handle 0x77ed00e001d0 failed : 3
"""

# NumPy 2's conversion check (numpy/_core/src/multiarray, NEP 50): a Python int past an int32 array's range,
# and the same check for a byte array, no 32-bit limit in it.
NUMPY_INT32 = "OverflowError: Python integer 2147483648 out of bounds for int32\n"
NUMPY_UINT8 = "OverflowError: Python integer 256 out of bounds for uint8\n"


def test_nccl_result_codes_are_nccl_errors():
    assert "nccl-error" in signals(NCCL_INTERNAL)


def test_numpy_int32_bound_is_int32_overflow():
    assert top(NUMPY_INT32) == "int32-index-overflow"
    assert "int32-index-math" not in signals(NUMPY_UINT8)


# --- the fix quoted as a diff ------------------------------------------------------------------------------

# https://github.com/ModelTC/LightLLM/pull/998: the PR's diff widens the loaded token index to 64 bits.
LIGHTLLM_WIDENING = """\
Fix error illegal memory access when max_total_token_num is too large

lightllm/models/deepseek2/triton_kernel/context_flashattention_nopad.py:94
             Req_to_tokens + stride_req_to_tokens_b * cur_batch_req_idx + stride_req_to_tokens_s * (start_n + offs_n),
             mask=(start_n + offs_n) < block_end_loc,
             other=0,
-        )
+        ).to(tl.int64)
"""  # noqa: E501

# https://github.com/vllm-project/vllm/pull/19298: DeepEP's buffer-size assertion, a size check with no 32-bit
# limit in it (the expert-parallel buffer).
DEEPEP_SIZE_ASSERT = (
    "RuntimeError: Failed: Assertion error /mnt/data/home/smo/vllm/tools/ep_kernels/ep_kernels_workspace/"
    "DeepEP/csrc/deep_ep.cpp:1040 'layout.total_bytes <= num_rdma_bytes'\n"
)


def test_a_diff_widening_an_offset_to_64_bits_is_int32_overflow():
    assert "int64-widening" in signals(LIGHTLLM_WIDENING)
    assert top(LIGHTLLM_WIDENING) == "int32-index-overflow"


def test_a_size_assertion_without_a_32_bit_limit_is_not_int32():
    found = signals(DEEPEP_SIZE_ASSERT)
    assert "int32-index-math" not in found and "int64-widening" not in found
    assert top(DEEPEP_SIZE_ASSERT) != "int32-index-overflow"


# https://github.com/vllm-project/vllm-ascend/issues/397 and https://github.com/hiyouga/LlamaFactory/issues/3839
# (their titles): the collective library's failure on Ascend NPUs, HCCL for NCCL.
HCCL_FAILURES = (
    "RuntimeError: create:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:89 HCCL function error: "
    "HcclCommInitRootInfo(numRanks, &rootInfo, rank, &(comm->hcclComm_))\n"
    "RuntimeError: [ERROR] HCCL error in: torch_npu/csrc/distributed/ProcessGroupHCCL.cpp:64\n"
)


def test_hccl_failures_are_the_collective_librarys_like_nccl():
    assert signals(HCCL_FAILURES).count("nccl-error") == 2
    assert top(HCCL_FAILURES) == "other"


# --- a model load that failed for its file, not for memory ------------------------------------------------

# llama-server's lines for a truncated GGUF (src/llama-model-loader.cpp's check), as an application's test
# quotes the real output: the load failed for the file, not the device.
TRUNCATED_GGUF = """\
E llama_model_load: error loading model: tensor 'token_embd.weight' data is not within the file bounds, model is corrupted or incomplete
E llama_model_load_from_file_impl: failed to load model
"""  # noqa: E501

# https://github.com/ikawrakow/ik_llama.cpp/issues/756: the same load failing for memory.
LOAD_OUT_OF_MEMORY = """\
ggml_backend_cuda_buffer_type_alloc_buffer: allocating 44063.76 MiB on device 0: cudaMalloc failed: out of memory
llama_model_load: error loading model: unable to allocate backend buffer
llama_load_model_from_file: failed to load model
"""  # noqa: E501


def test_a_model_file_the_loader_cannot_read_is_not_the_weights_memory():
    found = signals(TRUNCATED_GGUF)
    assert "misreported-oom" in found and "load-model-failed" not in found
    assert top(TRUNCATED_GGUF) == "other"


def test_a_load_that_ran_out_of_memory_is_still_the_weights():
    assert "misreported-oom" not in signals(LOAD_OUT_OF_MEMORY)
    assert top(LOAD_OUT_OF_MEMORY) == "weights-dont-fit"
