"""Other engines' memory failures read by the step and the buffer they name (llama.cpp's compute buffer and
KV cells, TensorRT-LLM's executor components, KV blocks and LoRA cache, Apple Metal's buffer limit). Each text
is real, from the public thread cited above it."""

from __future__ import annotations

from tests.diagnosis import pasted

import oomguard
from oomguard.diagnosis.evidence import Evidence, OomMessage, Signal, StartupNumber
from oomguard.units import GiB, MiB


def read(text: str) -> Evidence:
    return pasted.read(text, "evidence.log")


def names(evidence: Evidence) -> list[str]:
    """The engine's signals (not the generic exception line, the prose readers' words, the steps reached)."""
    return [
        s.name
        for s in evidence.of(Signal)
        if s.name not in ("exception", "failure-words") and not s.name.startswith(("prose-", "milestone-"))
    ]


def the(evidence: Evidence, name: str) -> Signal:
    [s] = evidence.signals(name)
    return s


# --- llama.cpp / ollama / ik_llama.cpp / LM Studio -------------------------------------------------------

# https://github.com/ollama/ollama/issues/4225: the KV cache is in host memory (CUDA_Host); the 4.4 GiB
# compute buffer for a 512-token micro-batch over a 65536-token context is what the GPU cannot hold.
OLLAMA_COMPUTE = """llama_kv_cache_init:  CUDA_Host KV buffer size =  8192.00 MiB
llama_new_context_with_model: KV self size  = 8192.00 MiB, K (f16): 4096.00 MiB, V (f16): 4096.00 MiB
llama_new_context_with_model:  CUDA_Host  output buffer size =     0.50 MiB
ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4507.00 MiB on device 0: cudaMalloc failed: out of memory
ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 4725934080
llama_new_context_with_model: failed to allocate compute buffers
"""  # noqa: E501


def test_a_compute_buffer_larger_than_the_kv_on_the_device_is_the_activation_peak():
    evidence = read(OLLAMA_COMPUTE)
    s = the(evidence, "prefill-tokens-dont-fit")
    assert (s.where.line, s.number("requested_bytes")) == (4, 4507 * MiB)
    assert s.number("kv_buffer_bytes") is None  # host KV takes nothing from the GPU
    assert "max-model-len-exceeds-kv" not in names(evidence)
    assert oomguard.diagnose(OLLAMA_COMPUTE).top == "activation-peak"


# https://github.com/ikawrakow/ik_llama.cpp/pull/235: 180 MiB of KV on a device, 8.9 GB of compute buffer on
# another (pipeline parallelism keeps 4 copies).
IK_LLAMA_COMPUTE = """llama_kv_cache_init:     CUDA14 KV buffer size =   180.00 MiB
llama_new_context_with_model: KV self size  = 2196.00 MiB, c^KV (f16): 2196.00 MiB, kv^T: not used
llama_new_context_with_model:  CUDA_Host  output buffer size =     0.99 MiB
llama_new_context_with_model: pipeline parallelism enabled (n_copies=4)
ggml_backend_cuda_buffer_type_alloc_buffer: allocating 8900.01 MiB on device 0: cudaMalloc failed: out of memory
ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 9332334592
llama_new_context_with_model: failed to allocate compute buffers
llama_init_from_gpt_params: error: failed to create context with model '/models/DeepSeek-R1-11446-Q2_K-00001-of-00030.gguf'
"""  # noqa: E501


def test_the_compute_buffer_is_weighed_against_the_kv_of_its_own_device():
    evidence = read(IK_LLAMA_COMPUTE)
    assert names(evidence) == ["prefill-tokens-dont-fit"]  # the context failure that follows is its echo
    assert oomguard.diagnose(IK_LLAMA_COMPUTE).top == "activation-peak"


def test_a_compute_buffer_smaller_than_the_kv_already_placed_is_still_the_context():
    # https://github.com/ollama/ollama/issues/10735's lines with ggml's naming of the buffer after them: 51 GB
    # of KV on CUDA0 (20 slots x 32768), then 42 GB more for the compute buffer.
    text = (
        "llama_kv_cache_unified:      CUDA0 KV buffer size = 51200.00 MiB\n"
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 42256.00 MiB on device 0: cudaMalloc failed: "
        "out of memory\n"
        "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 44308623360\n"
        "llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers\n"
    )
    evidence = read(text)
    assert names(evidence) == ["max-model-len-exceeds-kv"]
    assert the(evidence, "max-model-len-exceeds-kv").where.line == 2


# https://github.com/ggml-org/llama.cpp/issues/16725: no step lines, only the failure's own; the server's
# "failed to load model" wraps the context failure and is not the weights.
LLAMACPP_ROCM_PP = """ggml_backend_cuda_buffer_type_alloc_buffer: allocating 14136.04 MiB on device 0: cudaMalloc failed: out of memory
ggml_gallocr_reserve_n: failed to allocate ROCm0 buffer of size 14822711296
graph_reserve: failed to allocate compute buffers
llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers
common_init_from_params: failed to create context with model 'models/large/Apertus-70B-Instruct-2509-IQ4_XS.gguf', try reducing --n-gpu-layers if you're running out of VRAM
srv    load_model: failed to load model, 'models/large/Apertus-70B-Instruct-2509-IQ4_XS.gguf'
"""  # noqa: E501


def test_the_servers_load_failure_after_a_context_failure_is_not_the_weights():
    evidence = read(LLAMACPP_ROCM_PP)
    assert names(evidence) == ["prefill-tokens-dont-fit"]
    assert oomguard.diagnose(LLAMACPP_ROCM_PP).top == "activation-peak"


# https://github.com/ggml-org/llama.cpp/issues/29090: the unified KV cache has no free cells for the batch.
LLAMACPP_NO_SLOT = """[37723] 52.17.402.129 W decode: failed to find a memory slot for batch of size 128
[37723] 52.17.402.148 W srv        decode: failed to find free space in the KV cache, retrying with smaller batch size, off = 766, n_batch = 64, ret = 1
[37723] 52.17.408.129 E init_batch: failed to prepare attention ubatches
"""  # noqa: E501


def test_a_batch_without_free_kv_cells_is_the_pool_running_dry():
    evidence = read(LLAMACPP_NO_SLOT)
    assert {s.where.line for s in evidence.signals("kv-pool-dry")} <= {1, 2}  # both lines name it
    assert evidence.signals("kv-pool-dry")[0].where.line == 1
    assert oomguard.diagnose(LLAMACPP_NO_SLOT).top == "kv-exhaustion-at-runtime"
    # https://github.com/withcatai/node-llama-cpp/issues/190: the bindings' wording of the same failure.
    bindings = (
        "[Error: could not find a KV slot for the batch (try reducing the size of the batch or increase the "
        "context)]\n"
    )
    assert oomguard.diagnose(bindings).top == "kv-exhaustion-at-runtime"


# https://github.com/ollama/ollama/issues/10127: ollama's Go runner words the same failure its own way (its
# Decode turns llama_decode's "no KV slot" return into this error), and panics on it.
OLLAMA_NO_SLOT = "panic: failed to decode batch: could not find a kv cache slot (length: 6656)\n"


def test_ollamas_runner_finding_no_kv_cache_slot_is_the_pool_running_dry():
    assert names(read(OLLAMA_NO_SLOT)) == ["kv-pool-dry"]
    assert oomguard.diagnose(OLLAMA_NO_SLOT).top == "kv-exhaustion-at-runtime"


# https://github.com/ollama/ollama/issues/9687: ollama's own engine reserves the compute graph and prints no
# "failed to allocate compute buffers" after the graph allocator's line; that line alone names the buffer.
OLLAMA_GRAPH = """Mar 12 10:41:00 user-desktop ollama[4504]: ggml_backend_cuda_buffer_type_alloc_buffer: allocating 8281.63 MiB on device 0: cudaMalloc failed: out of memory
Mar 12 10:41:00 user-desktop ollama[4504]: ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 8683921920
"""  # noqa: E501


def test_the_graph_allocators_failure_alone_is_the_compute_buffer():
    s = the(read(OLLAMA_GRAPH), "prefill-tokens-dont-fit")
    assert (s.where.line, s.number("requested_bytes")) == (1, round(8281.63 * MiB))
    assert oomguard.diagnose(OLLAMA_GRAPH).top == "activation-peak"


def test_a_buffer_for_the_models_tensors_is_not_the_compute_buffer():
    # https://github.com/lmstudio-ai/lmstudio-bug-tracker/issues/1599 (its first lines): the same "failed to
    # allocate ... buffer of size" from alloc_tensor_range, which places the weights, not a graph.
    text = (
        "ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory\n"
        "alloc_tensor_range: failed to allocate Vulkan0 buffer of size 913270528\n"
        "llama_model_load: error loading model: unable to allocate Vulkan0 buffer\n"
    )
    assert "prefill-tokens-dont-fit" not in names(read(text))
    assert oomguard.diagnose(text).top == "weights-dont-fit"


def test_ollama_runner_exiting_while_it_loads_is_the_weights():
    # https://github.com/ollama/ollama/issues/1566: a 24.6 GiB Mixtral on a 24 GB card, all layers offloaded.
    text = "Error: llama runner exited, you may not have enough available memory to run this model\n"
    assert names(read(text)) == ["load-model-failed"]
    assert oomguard.diagnose(text).top == "weights-dont-fit"


# https://github.com/mozilla-ai/llamafile/pull/881: the Metal backend's warm-up right after the context was
# created, with an 11 GB KV buffer, runs out of the working set (no size given).
LLAMAFILE_METAL = """llama_kv_cache:      Metal KV buffer size = 11440.00 MiB
llama_kv_cache: size = 11440.00 MiB ( 28160 cells, 104 layers,  4/1 seqs), K (f16): 5720.00 MiB, V (f16): 5720.00 MiB
llama_context: Flash Attention was auto, set to enabled
llama_context:      Metal compute buffer size =   307.00 MiB
ggml_metal_synchronize: error: command buffer 0 failed with status 5
/Users/mala/workspace/llama.cpp/ggml/src/ggml-metal/ggml-metal-context.m:235: fatal error
error: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)
"""  # noqa: E501


def test_a_metal_out_of_memory_right_after_the_context_was_created_is_the_context():
    evidence = read(LLAMAFILE_METAL)
    s = the(evidence, "max-model-len-exceeds-kv")
    assert (s.where.line, s.number("kv_buffer_bytes")) == (7, 11440 * MiB)
    assert oomguard.diagnose(LLAMAFILE_METAL).top == "max-model-len-exceeds-kv"


# --- TensorRT-LLM ------------------------------------------------------------------------------------------

# https://github.com/NVIDIA/TensorRT-LLM/issues/5950: the PyTorch executor names the component it could not
# create and the free memory around each one created before it.
TRTLLM_EXECUTOR = """RuntimeError: Executor creation failed due to insufficient GPU memory.
The following component could not be created: Additional executor resources
Total GPU memory (GiB): 95.00
Free GPU memory before component creation attempt (GiB): 16.95
Model: 94.30 / 47.83
Sampler: 47.83 / 47.83
Initial KV cache (temporary for KV cache size estimation): 47.83 / 45.67
Drafter: 45.67 / 45.67
"""


def test_trtllm_executor_component_that_failed_is_the_step():
    evidence = read(TRTLLM_EXECUTOR)
    assert [s.where.line for s in evidence.signals("prefill-tokens-dont-fit")] == [2]
    numbers = {n.quantity: n.value for n in evidence.of(StartupNumber)}
    assert numbers["gpu_total_bytes"] == 95 * GiB
    assert round(numbers["weights_bytes"] / GiB, 2) == 46.47
    assert oomguard.diagnose(TRTLLM_EXECUTOR).top == "activation-peak"
    model = TRTLLM_EXECUTOR.replace(
        "could not be created: Additional executor resources", "could not be created: Model"
    )
    assert "load-model-failed" in names(read(model))


# https://github.com/NVIDIA/TensorRT-LLM/issues/694: a running request finds no free KV block.
TRTLLM_NO_BLOCKS = """[TensorRT-LLM][ERROR] [TensorRT-LLM][ERROR] Assertion failed: Can't allocate new blocks. No free blocks left. (/home/jenkins/agent/workspace/LLM/main/L0_PostMerge/llm/cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp:362)
1       0x557282845de2 tensorrt_llm::common::throwRuntimeError(char const*, int, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&) + 100
"""  # noqa: E501


def test_trtllm_without_free_kv_blocks_is_the_pool_running_dry():
    assert {s.where.line for s in read(TRTLLM_NO_BLOCKS).signals("kv-pool-dry")} == {1}
    assert oomguard.diagnose(TRTLLM_NO_BLOCKS).top == "kv-exhaustion-at-runtime"


# https://github.com/triton-inference-server/tensorrtllm_backend/issues/559: the host LoRA cache holds one
# max-sized adapter; storing the request's adapter fails.
TRTLLM_PEFT = """[TensorRT-LLM][INFO] Using 39976960 bytes for LoRA host cache
[TensorRT-LLM][INFO] Using 312836096 bytes for LoRA device cache
[TensorRT-LLM][INFO] Max LoRA size is 19988480
[TensorRT-LLM][INFO] LoRA host Cache can hold 1 max sized LoRAs
[TensorRT-LLM][ERROR] Encountered an error when fetching new request: Error storing task=1 in PEFT cache -- Cache is
"""  # noqa: E501


def test_trtllm_peft_cache_that_cannot_store_the_adapter_is_the_lora_extra():
    s = the(read(TRTLLM_PEFT), "lora-cache-full")
    assert (s.where.line, s.number("host_cache_bytes"), s.number("device_cache_bytes")) == (
        5,
        39976960,
        312836096,
    )
    assert oomguard.diagnose(TRTLLM_PEFT).top == "spec-decode-or-lora-extra"


def test_tensorrt_builder_tactic_beyond_the_device_gives_its_request_and_the_free_memory():
    # https://github.com/NVIDIA/TensorRT-LLM/issues/85: max_batch_size 128 on a 40 GB A100.
    text = (
        "[TRT] [W] Tactic Device request: 41472MB Available: 40338MB. Device memory is insufficient to use "
        "tactic.\n"
    )
    [oom] = read(text).of(OomMessage)
    assert (oom.requested, oom.free) == (41472 * MiB, 40338 * MiB)
    assert oomguard.diagnose(text).top == "activation-peak"


# --- Apple Metal (MLX) -------------------------------------------------------------------------------------


def test_mlx_buffer_count_limit_is_not_read_as_memory():
    # https://github.com/ml-explore/mlx-lm/issues/1644: MLX's count of live Metal buffers hit the limit.
    text = "[metal::malloc] Resource limit (499000) exceeded.\n"
    evidence = read(text)
    assert not evidence.of(OomMessage)
    assert the(evidence, "platform-limit").number("metal_buffers") == 499000
    assert oomguard.diagnose(text).top == "other"


# --- other engines' own refusals ---------------------------------------------------------------------------


def test_an_engine_saying_its_kv_cache_has_no_room_at_startup_is_the_kv_pool():
    # https://github.com/FlashML-org/FreeToken (web issue 2): a 27B FP8 model's default page pool on a 4090.
    text = (
        "Qwen3.8-27B FP8 的引擎持续报错或异常退出,原始错误如下。可尝试重启或关闭擎。\n"
        "AssertionError: Not enough memory for KV cache，try reducing --num-pages\n"
    )
    assert names(read(text)) == ["no-kv-cache-memory"]
    assert oomguard.diagnose(text).top == "kv-cache-insufficient-at-startup"


def test_not_enough_memory_for_something_else_is_not_the_kv_pool():
    assert "no-kv-cache-memory" not in names(read("RuntimeError: Not enough memory for the model weights\n"))
