# ruff: noqa: E501 (the messages are quoted whole, as the engines print them)
"""A catalogue of the memory-failure messages the other engines' own source code prints (llama.cpp / ggml,
ollama, TGI, TensorRT-LLM, LMDeploy, ExLlamaV2, MLX / mlx-lm, CTranslate2), each with realistic values filled
in, diagnosed alone and behind a log prefix that engine (or its usual wrapper) writes, with the class the
message's mechanism implies ranked first.

Each row cites the public source file that prints the message (repository and path, as of the releases the
comments name). Near misses are messages of the same families that must not give the row's class.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from tests.diagnosis import pasted

import oomguard
from oomguard.diagnosis.evidence import OomMessage, Signal


@dataclass(frozen=True)
class Row:
    name: str
    text: str  # the message as the code prints it (one or more lines)
    cls: str  # the class its mechanism implies
    prefix: str = ""  # a typical log prefix of the engine, put in front of every line


# Prefixes (as the engines' loggers write them).
LLAMA_SERVER = "0.06.650.537 E "  # llama-server's common log (timestamp, level)
OLLAMA_JOURNAL = "Mar 12 10:41:00 user-desktop ollama[4504]: "  # ollama under systemd
OLLAMA_SLOG = (
    'time=2025-03-12T10:41:00.000Z level=ERROR source=server.go:612 msg="llama runner terminated" error='
)
TGI_ROUTER = (
    "2024-05-01T10:00:00.000000Z ERROR warmup{max_input_length=4095 max_prefill_tokens=4096 "
    "max_total_tokens=4096 max_batch_size=None}:warmup: text_generation_router_v3::client: "
    "backends/v3/src/client/mod.rs:45: Server error: "
)
TGI_SHARD = "2024-05-01T10:00:00.000000Z ERROR text_generation_launcher: "
TRTLLM_CPP = "[TensorRT-LLM][ERROR] "
TRTLLM_PY = "[05/01/2025-10:00:00] [TRT-LLM] [RANK 0] [E] "
LMDEPLOY_PY = "2025-05-01 10:00:00,000 - lmdeploy - ERROR - engine.py:123 - "
TURBOMIND = "[TM][ERROR] "
EXLLAMA_TABBY = "2025-05-01 10:00:00.000 ERROR:    "  # TabbyAPI's loguru over ExLlamaV2
MLX_LM = "2025-05-01 10:00:00,000 - mlx_lm - WARNING - "


CATALOG = [
    # --- llama.cpp / ggml (ggml-org/llama.cpp) ------------------------------------------------------------
    # src/llama-kv-cache.cpp: ggml_backend_alloc_ctx_tensors_from_buft fails -> throw "failed to allocate
    # buffer for kv cache"; src/llama-context.cpp (llama_init_from_model) wraps it. The KV cache is sized by
    # n_ctx x n_seq, so the context asks more than the device holds.
    Row(
        "llamacpp-kv-buffer",
        "llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache\n",
        "max-model-len-exceeds-kv",
        LLAMA_SERVER,
    ),
    # ggml/src/ggml-alloc.c alloc_tensor_range then src/llama-kv-cache.cpp: the KV tensors' buffer (the same
    # allocator line the weights use, named by the line after it).
    Row(
        "llamacpp-kv-tensor-range",
        "alloc_tensor_range: failed to allocate Vulkan0 buffer of size 1632174080\n"
        "llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache\n",
        "max-model-len-exceeds-kv",
        LLAMA_SERVER,
    ),
    # older builds (src/llama.cpp llama_kv_cache_init): "llama_kv_cache_init: failed to allocate buffer for
    # kv cache" then "llama_new_context_with_model: llama_kv_cache_init() failed for self-attention cache".
    Row(
        "llamacpp-kv-init-old",
        "llama_kv_cache_init: failed to allocate buffer for kv cache\n"
        "llama_new_context_with_model: llama_kv_cache_init() failed for self-attention cache\n",
        "max-model-len-exceeds-kv",
        OLLAMA_JOURNAL,
    ),
    # src/llama-model.cpp load_tensors: "unable to allocate %s buffer" (the model's tensors), reported by
    # src/llama.cpp as "llama_model_load: error loading model: ...".
    Row(
        "llamacpp-model-buffer",
        "alloc_tensor_range: failed to allocate CUDA0 buffer of size 4294967296\n"
        "llama_model_load: error loading model: unable to allocate CUDA0 buffer\n",
        "weights-dont-fit",
        LLAMA_SERVER,
    ),
    Row(
        "llamacpp-model-buffer-alone",
        "llama_model_load: error loading model: unable to allocate CUDA0 buffer\n",
        "weights-dont-fit",
        OLLAMA_JOURNAL,
    ),
    # ggml/src/ggml-alloc.c ggml_gallocr_reserve_n: the compute graph's intermediate tensors (the worst-case
    # micro-batch over the whole context).
    Row(
        "ggml-gallocr-reserve",
        "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 9332334592\n",
        "activation-peak",
        OLLAMA_JOURNAL,
    ),
    # src/llama-context.cpp graph_reserve / sched_reserve.
    Row(
        "llamacpp-graph-reserve",
        "graph_reserve: failed to allocate compute buffers\n",
        "activation-peak",
        LLAMA_SERVER,
    ),
    Row(
        "llamacpp-compute-pp",
        "llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers\n",
        "activation-peak",
        LLAMA_SERVER,
    ),
    # src/llama-context.cpp llama_output_reserve: the logits buffer (n_vocab x outputs x fp32).
    Row(
        "llamacpp-output-buffer",
        "llama_output_reserve: failed to allocate output buffer of size 1187.50 MiB\n",
        "sampler-or-logits",
        LLAMA_SERVER,
    ),
    # src/llama-context.cpp decode: no free cells in the KV cache for the batch.
    Row(
        "llamacpp-no-memory-slot",
        "decode: failed to find a memory slot for batch of size 512\n",
        "kv-exhaustion-at-runtime",
        "0.52.17.402 W ",
    ),
    # tools/server/server.cpp update_slots: the server's retry on the same condition.
    Row(
        "llamacpp-server-retry",
        "srv  update_slots: failed to find free space in the KV cache, retrying with smaller batch size, "
        "i = 0, n_batch = 2048, ret = 1\n",
        "kv-exhaustion-at-runtime",
        "0.52.17.402 W ",
    ),
    # tools/server/server.cpp (exceed_context_size_error): a request longer than the context, which is the
    # KV cache llama.cpp allocated (-c / n_ctx split over the slots).
    Row(
        "llamacpp-exceeds-context",
        "request (9100 tokens) exceeds the available context size (8192 tokens), try increasing it\n",
        "max-model-len-exceeds-kv",
        "0.10.000.000 E srv    send_error: task id = 12, error: ",
    ),
    Row(
        "llamacpp-exceeds-context-old",
        "the request exceeds the available context size, try increasing it\n",
        "max-model-len-exceeds-kv",
        "0.10.000.000 E srv    send_error: task id = 12, error: ",
    ),
    # ggml/src/ggml-cuda/ggml-cuda.cu (ggml_backend_cuda_buffer_type_alloc_buffer) while src/llama-model.cpp
    # load_tensors places the weights: the model's buffer.
    Row(
        "llamacpp-cuda-weights",
        "load_tensors: loading model tensors, this can take a while... (mmap = true)\n"
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 15420.00 MiB on device 0: cudaMalloc failed: "
        "out of memory\n"
        "alloc_tensor_range: failed to allocate CUDA0 buffer of size 16169041920\n"
        "llama_model_load: error loading model: unable to allocate CUDA0 buffer\n",
        "weights-dont-fit",
        LLAMA_SERVER,
    ),
    # common/fit.cpp gives up when -ngl was set (a warning: the load goes on), then the weights' buffer fails.
    Row(
        "llamacpp-fit-abort-then-weights",
        "common_fit_params: failed to fit params to free device memory: n_gpu_layers already set by user to 999, "
        "abort\n"
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 97809.00 MiB on device 0: cudaMalloc failed: out "
        "of memory\n"
        "alloc_tensor_range: failed to allocate CUDA0 buffer of size 102560175104\n"
        "llama_model_load: error loading model: unable to allocate CUDA0 buffer\n",
        "weights-dont-fit",
        LLAMA_SERVER,
    ),
    # the same allocation while src/llama-context.cpp creates the context: the KV cache for n_ctx.
    Row(
        "llamacpp-cuda-kv",
        "llama_context: n_ctx = 131072\n"
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 16384.00 MiB on device 0: cudaMalloc failed: "
        "out of memory\n"
        "alloc_tensor_range: failed to allocate CUDA0 buffer of size 17179869184\n"
        "llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache\n",
        "max-model-len-exceeds-kv",
        LLAMA_SERVER,
    ),
    # ggml/src/ggml-metal/ggml-metal-device.m (ggml_metal_buffer_init) while the model's tensors load.
    Row(
        "ggml-metal-weights",
        "load_tensors: loading model tensors, this can take a while... (mmap = false)\n"
        "ggml_metal_buffer_init: error: failed to allocate buffer, size = 18000.00 MiB\n"
        "alloc_tensor_range: failed to allocate MTL0 buffer of size 18874368000\n"
        "llama_model_load: error loading model: unable to allocate MTL0 buffer\n",
        "weights-dont-fit",
        LLAMA_SERVER,
    ),
    # tools/mtmd/clip.cpp warm-up on the largest image, then ggml-alloc.c's graph reservation for it.
    Row(
        "mtmd-warmup-graph",
        "warmup: warmup with image size = 1024 x 1024\n"
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 8192.00 MiB on device 0: cudaMalloc failed: out "
        "of memory\n"
        "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 8589934592\n",
        "multimodal-encoder",
        LLAMA_SERVER,
    ),
    # ggml/src/ggml-cuda/ggml-cuda.cu: the CUDA pool growing for a kernel's temporary buffer (CUDA_CHECK names
    # the function), during a batch's compute.
    Row(
        "ggml-cuda-pool",
        "CUDA error: out of memory\n"
        "  current device: 0, in function alloc at /llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu:376\n"
        "  cudaMalloc((void **) &ptr, look_ahead_size)\n"
        "/llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu:75: CUDA error\n",
        "activation-peak",
    ),
    # ggml/src/ggml-cpu (ggml_backend_cpu_buffer_type_alloc_buffer) and ggml/src/ggml.c (ggml_aligned_malloc):
    # host RAM refusing the layers kept on the CPU.
    Row(
        "ggml-cpu-buffer",
        "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 42628415488\n"
        "llama_model_load: error loading model: unable to allocate CPU buffer\n",
        "host-ram-oom",
        LLAMA_SERVER,
    ),
    Row(
        "ggml-aligned-malloc",
        "ggml_aligned_malloc: insufficient memory (attempted to allocate 40652.88 MB)\n",
        "host-ram-oom",
        OLLAMA_JOURNAL,
    ),
    # ggml/src/ggml-vulkan/ggml-vulkan.cpp ggml_vk_create_buffer: one buffer above maxMemoryAllocationSize.
    Row(
        "ggml-vulkan-allocation-limit",
        "ggml_vulkan: Requested buffer size exceeds device memory allocation limit: ErrorOutOfDeviceMemory\n",
        "other",
        OLLAMA_JOURNAL,
    ),
    # --- ollama (ollama/ollama) ---------------------------------------------------------------------------
    # llm/server.go NewLlamaServer (0.4-0.5): the layers left on the CPU need more than free RAM + swap.
    Row(
        "ollama-system-memory",
        "Error: model requires more system memory (15.3 GiB) than is available (11.2 GiB)\n",
        "host-ram-oom",
    ),
    Row(
        "ollama-too-large-for-system",
        'time=2025-01-10T10:00:00.000Z level=WARN source=server.go:136 msg="model request too large for system" '
        'requested="15.3 GiB" available=12025995264 total="15.5 GiB" free="11.2 GiB" swap="0 B"\n',
        "host-ram-oom",
    ),
    # llm/server.go (ollamaServer.Load, 0.11+): the user's num_gpu places more layers than the GPUs hold.
    Row(
        "ollama-layout-num-gpu",
        "Error: 500 Internal Server Error: memory layout cannot be allocated with num_gpu = 999\n",
        "weights-dont-fit",
    ),
    # ml/backend.go ErrNoMem (the runner's panic, 0.11+): each allocation with its status, U unallocated,
    # A allocated, F failed. The failed one names the part: Weights, Cache (the KV, sized by num_ctx), Graph
    # (the worst-case compute graph).
    Row(
        "ollama-nomem-graph",
        "panic: insufficient memory - required allocations: {InputWeights:411041792A CPU:{Name:CPU ID:0 "
        "Weights:[0U 0U] Cache:[0U 0U] Graph:0U} GPUs:[{DeviceID:{ID:GPU-5f1c2e4a Library:CUDA} Name:CUDA0 "
        "Weights:[199229440A 199229440A 1065353216A] Cache:[134217728A 134217728A] Graph:4294967296F}]}\n",
        "activation-peak",
        OLLAMA_JOURNAL,
    ),
    Row(
        "ollama-nomem-cache",
        "panic: insufficient memory - required allocations: {InputWeights:411041792A CPU:{Name:CPU ID:0 "
        "Weights:[0U 0U] Cache:[0U 0U] Graph:0U} GPUs:[{DeviceID:{ID:GPU-5f1c2e4a Library:CUDA} Name:CUDA0 "
        "Weights:[199229440A 199229440A 1065353216A] Cache:[8589934592F 8589934592U] Graph:0U}]}\n",
        "max-model-len-exceeds-kv",
        OLLAMA_JOURNAL,
    ),
    Row(
        "ollama-nomem-weights",
        "panic: insufficient memory - required allocations: {InputWeights:411041792A CPU:{Name:CPU ID:0 "
        "Weights:[0U 0U] Cache:[0U 0U] Graph:0U} GPUs:[{DeviceID:{ID:GPU-5f1c2e4a Library:CUDA} Name:CUDA0 "
        "Weights:[199229440A 199229440F 1065353216U] Cache:[0U 0U] Graph:0U}]}\n",
        "weights-dont-fit",
        OLLAMA_JOURNAL,
    ),
    # runner/llamarunner (llama/llama.go Decode): llama_decode's "no KV slot" return.
    Row(
        "ollama-no-kv-slot",
        "panic: failed to decode batch: could not find a kv cache slot (length: 6656)\n",
        "kv-exhaustion-at-runtime",
        OLLAMA_JOURNAL,
    ),
    # llm/server.go (WaitUntilRunning): the runner's last error line wrapped as "llama runner process has
    # terminated: ...", the step named by llama.cpp's own words inside it.
    Row(
        "ollama-terminated-weights",
        "Error: llama runner process has terminated: error loading model: unable to allocate CUDA0 buffer\n",
        "weights-dont-fit",
    ),
    Row(
        "ollama-terminated-kv",
        "Error: 500 Internal Server Error: llama runner process has terminated: llama_init_from_model: failed "
        "to initialize the context: failed to allocate buffer for kv cache\n",
        "max-model-len-exceeds-kv",
    ),
    # llm/server.go: the runner exited while it loaded the model.
    Row(
        "ollama-runner-exited",
        "Error: llama runner exited, you may not have enough available memory to run this model\n",
        "weights-dont-fit",
    ),
    # --- TGI (huggingface/text-generation-inference) -------------------------------------------------------
    # server/text_generation_server/models/flash_causal_lm.py warmup: the prefill of
    # --max-batch-prefill-tokens through the model ran out (its profile run).
    Row(
        "tgi-prefill-tokens",
        "RuntimeError: Not enough memory to handle 4096 prefill tokens. You need to decrease "
        "`--max-batch-prefill-tokens`\n",
        "activation-peak",
        TGI_SHARD,
    ),
    Row(
        "tgi-prefill-tokens-router",
        "Not enough memory to handle 4096 prefill tokens. You need to decrease `--max-batch-prefill-tokens`\n",
        "activation-peak",
        TGI_ROUTER,
    ),
    # server/text_generation_server/models/flash_causal_lm.py warmup (TGI 0.9-1.x, with an explicit
    # --max-batch-total-tokens): the KV blocks for that many tokens next to the weights, a prefill of 2 tokens.
    Row(
        "tgi-total-tokens",
        "RuntimeError: Not enough memory to handle 16000 total tokens with 2 prefill tokens. You need to "
        "decrease `--max-batch-total-tokens` or `--max-batch-prefill-tokens`\n",
        "kv-cache-insufficient-at-startup",
        TGI_SHARD,
    ),
    # backends/v3/src/lib.rs (V3Error::NotEnoughMemory): the KV blocks the warm-up left hold fewer tokens
    # than one request of --max-total-tokens.
    Row(
        "tgi-max-total-tokens",
        "Error: Backend(NotEnoughMemory(32768))\n",
        "max-model-len-exceeds-kv",
    ),
    Row(
        "tgi-max-total-tokens-display",
        "Not enough memory to handle `max_total_tokens=32768`\n",
        "max-model-len-exceeds-kv",
        "2024-05-01T10:00:00.000000Z ERROR text_generation_router::server: router/src/server.rs:1800: ",
    ),
    # server/text_generation_server/models/cache_manager.py (CacheManager.allocate): a batch asks more KV
    # blocks than are free.
    Row(
        "tgi-out-of-cache-blocks",
        "AssertionError: Out of available cache blocks: asked 107, only 4 free blocks\n",
        "kv-exhaustion-at-runtime",
        "2024-05-01T10:00:00.000000Z ERROR batch{batch_size=4}:prefill:prefill{id=12 size=4}:prefill{id=12 "
        "size=4}: text_generation_client: router/client/src/lib.rs:33: Server error: ",
    ),
    # server/text_generation_server/models/flash_causal_lm.py: a decode graph's capture ran out.
    Row(
        "tgi-graph-warmup",
        "Decode cuda graph warmup failed\n",
        "cuda-graph-capture",
        "2024-05-01T10:00:00.000000Z  WARN text_generation_launcher: ",
    ),
    # --- TensorRT-LLM (NVIDIA/TensorRT-LLM) ----------------------------------------------------------------
    # tensorrt_llm/_torch/pyexecutor/resource_manager.py get_max_atten_window_upper_bound: the primary pool
    # has not one block per sequence (free_gpu_memory_fraction of what the weights left).
    Row(
        "trtllm-impossible-to-fit",
        "AssertionError: Impossible to fit in any sequence in kvCache\n",
        "kv-cache-insufficient-at-startup",
        TRTLLM_PY,
    ),
    # cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp (calculateMaxNumBlocks): what was free for the pool
    # after the engine and its runtime buffers; next to nothing of 22 GiB.
    Row(
        "trtllm-kv-available-tiny",
        "Memory usage when calculating max tokens in paged kv cache: total: 22.19 GiB, available: 0.11 GiB\n",
        "kv-cache-insufficient-at-startup",
        "[TensorRT-LLM][INFO] ",
    ),
    # cpp/tensorrt_llm/batch_manager/runtimeBuffers.cpp (RuntimeBuffers::reshape, in a frame of the C++
    # stack): the per-step buffers, the logits above all, failed to grow.
    Row(
        "trtllm-runtime-buffers",
        "Encountered an error in forwardAsync function: [TensorRT-LLM][ERROR] CUDA runtime error in "
        "::cudaMallocAsync(ptr, n, mCudaStream->get()): out of memory (/src/cpp/tensorrt_llm/runtime/"
        "tllmBuffers.h:125)\n"
        "1       0x7f3a2c1e5a9b tensorrt_llm::batch_manager::RuntimeBuffers::reshape(...) + 1675\n",
        "sampler-or-logits",
        TRTLLM_CPP,
    ),
    # cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp: a running request finds the pool empty.
    Row(
        "trtllm-no-free-blocks",
        "Assertion failed: Can't allocate new blocks. No free blocks left. "
        "(/src/cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp:362)\n",
        "kv-exhaustion-at-runtime",
        TRTLLM_CPP,
    ),
    # cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp (2024+): the engine's max length shortened to what
    # the pool holds.
    Row(
        "trtllm-length-reduced",
        "maxAttentionWindow and maxSequenceLen are too large for at least one sequence to fit in kvCache. "
        "they are reduced to 5185\n",
        "max-model-len-exceeds-kv",
        "[TensorRT-LLM][WARNING] ",
    ),
    # cpp/tensorrt_llm/batch_manager/trtGptModelInflightBatching.cpp (older): the pool below one sequence.
    Row(
        "trtllm-max-tokens-one-sequence",
        "Assertion failed: maxTokensInPagedKvCache (4096) must be large enough to process at least 1 sequence "
        "to completion (i.e. must be larger than beam_width (1) * tokensPerBlock (64) * maxBlocksPerSeq (128))\n",
        "max-model-len-exceeds-kv",
        TRTLLM_CPP,
    ),
    # tensorrt_llm/_torch/pyexecutor/py_executor_creator.py: the component that could not be created.
    Row(
        "trtllm-executor-kv",
        "RuntimeError: Executor creation failed due to insufficient GPU memory.\n"
        "The following component could not be created: KV cache\n"
        "Total GPU memory (GiB): 79.11\n"
        "Free GPU memory before component creation attempt (GiB): 1.20\n",
        "kv-cache-insufficient-at-startup",
    ),
    Row(
        "trtllm-executor-model",
        "RuntimeError: Executor creation failed due to insufficient GPU memory.\n"
        "The following component could not be created: Model\n"
        "Total GPU memory (GiB): 79.11\n"
        "Free GPU memory before component creation attempt (GiB): 78.60\n",
        "weights-dont-fit",
    ),
    Row(
        "trtllm-executor-sampler",
        "RuntimeError: Executor creation failed due to insufficient GPU memory.\n"
        "The following component could not be created: Sampler\n"
        "Total GPU memory (GiB): 79.11\n"
        "Free GPU memory before component creation attempt (GiB): 2.10\n"
        "Model: 78.60 / 2.10\n",
        "sampler-or-logits",
    ),
    # cpp/tensorrt_llm/batch_manager/peftCacheManager.cpp: the LoRA cache cannot hold the adapter.
    Row(
        "trtllm-peft-cache",
        "Encountered an error when fetching new request: Error storing task=1 in PEFT cache -- Cache is full. "
        "There are no pages available\n",
        "spec-decode-or-lora-extra",
        TRTLLM_CPP,
    ),
    # TensorRT builder (engine build through trtllm-build): a tactic's workspace above free memory.
    Row(
        "tensorrt-tactic",
        "Tactic Device request: 41472MB Available: 40338MB. Device memory is insufficient to use tactic.\n",
        "activation-peak",
        "[TRT] [W] ",
    ),
    # --- LMDeploy (InternLM/lmdeploy) ----------------------------------------------------------------------
    # lmdeploy/pytorch/engine/executor/base.py _get_num_gpu_blocks: cache_max_entry_count of what the weights
    # and the runtime buffers left holds fewer than three blocks.
    Row(
        "lmdeploy-kv-cache",
        "RuntimeError: No enough gpu memory for kv cache.\n",
        "kv-cache-insufficient-at-startup",
        LMDEPLOY_PY,
    ),
    # same file _reserve_runtime_mem: even with the prefill budget halved to nothing the pool stays below 16
    # blocks.
    Row(
        "lmdeploy-runtime",
        "RuntimeError: No enough gpu memory for runtime.\n",
        "kv-cache-insufficient-at-startup",
        LMDEPLOY_PY,
    ),
    # same file _reserve_state_cache_mem: the recurrent-state pool (one slot per batch entry) before the KV.
    Row(
        "lmdeploy-state-cache",
        "AssertionError: No enough gpu memory for state cache. Please reduce max_batch_size.\n",
        "kv-cache-insufficient-at-startup",
        LMDEPLOY_PY,
    ),
    # src/turbomind/models/llama/SequenceManager.cc: the linear-attention states take the whole cache budget
    # (cache_max_entry_count x free memory).
    Row(
        "turbomind-linear-state",
        "[SeqMgr] Linear-state memory (1536.00 MB) >= cache budget (1228.80 MB). \n"
        "Please decrease max_batch_size to reduce total linear state size or increase cache_max_entry_count.\n",
        "kv-cache-insufficient-at-startup",
        TURBOMIND,
    ),
    Row(
        "turbomind-kv-blocks",
        "Insufficient memory for KV cache blocks.\n",
        "kv-cache-insufficient-at-startup",
        TURBOMIND,
    ),
    # src/turbomind/models/llama/LlamaBatch.cc (as https://github.com/InternLM/lmdeploy/issues/720 quotes it):
    # the running batch finds no free cache block.
    Row(
        "turbomind-no-blocks",
        "No enough blocks.\n",
        "kv-exhaustion-at-runtime",
        TURBOMIND,
    ),
    # --- ExLlamaV2 (turboderp/exllamav2) -------------------------------------------------------------------
    # exllamav2/model.py forward: the sequence outgrows the cache's max_seq_len.
    Row(
        "exllamav2-exceeds-cache",
        "AssertionError: Total sequence length exceeds cache size in model.forward\n",
        "max-model-len-exceeds-kv",
        EXLLAMA_TABBY,
    ),
    # exllamav2/generator/dynamic.py: one job larger than the whole paged cache.
    Row(
        "exllamav2-job-pages",
        "AssertionError: Job requires 33 pages (only 32 available) and cannot be enqueued. Total cache "
        "allocated is 32 * 256 = 8192 tokens\n",
        "max-model-len-exceeds-kv",
        EXLLAMA_TABBY,
    ),
    # --- MLX / mlx-lm (ml-explore/mlx, ml-explore/mlx-lm) --------------------------------------------------
    # mlx_lm/generate.py wired_limit: the weights above 90% of Metal's recommended working set.
    Row(
        "mlxlm-model-near-working-set",
        "[WARNING] Generating with a model that requires 30521 MB which is close to the maximum recommended "
        "size of 22906 MB. This can be slow. See the documentation for possible work-arounds: "
        "https://github.com/ml-explore/mlx-lm/tree/main#large-models\n"
        "libc++abi: terminating due to uncaught exception of type std::runtime_error: [METAL] Command buffer "
        "execution failed: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)\n",
        "weights-dont-fit",
    ),
    # mlx/backend/metal/allocator.cpp: a count of live Metal buffers, not bytes.
    Row(
        "mlx-resource-limit",
        "[metal::malloc] Resource limit (499000) exceeded.\n",
        "other",
        "libc++abi: terminating due to uncaught exception of type std::runtime_error: ",
    ),
    # mlx/backend/metal/allocator.cpp: one buffer above Metal's maximum buffer length. In MLX that buffer is a
    # prompt's attention scores or activations (the corpus's reports of it are the prefill's), unlike the
    # Vulkan cap above, which ggml meets with its own buffers of any kind.
    Row(
        "mlx-max-buffer",
        "[metal::malloc] Attempting to allocate 137438953472 bytes which is greater than the maximum allowed "
        "buffer size of 77309411328 bytes.\n",
        "activation-peak",
        "libc++abi: terminating due to uncaught exception of type std::runtime_error: ",
    ),
]


def _prefixed(row: Row) -> str:
    return "".join(row.prefix + line + "\n" for line in row.text.splitlines())


@pytest.mark.parametrize("row", CATALOG, ids=[r.name for r in CATALOG])
def test_the_message_alone_ranks_its_class_first(row: Row) -> None:
    assert oomguard.diagnose(row.text).top == row.cls


@pytest.mark.parametrize("row", [r for r in CATALOG if r.prefix], ids=[r.name for r in CATALOG if r.prefix])
def test_the_message_behind_its_log_prefix_ranks_its_class_first(row: Row) -> None:
    assert oomguard.diagnose(_prefixed(row)).top == row.cls


# --- messages that carry no mechanism: read as an out-of-memory failure with what they say ---------------

READ_ONLY = [
    # mlx/backend/metal/allocator.cpp (malloc_or_wait, MLX < 0.22): the bytes asked for.
    ("[malloc_or_wait] Unable to allocate 9000000000 bytes.\n", 9000000000),
    # ggml/src/ggml-vulkan/ggml-vulkan.cpp: the device allocation that failed.
    ("ggml_vulkan: Device memory allocation of size 4294967296 failed.\n", 4294967296),
    # ggml/src/ggml-sycl/ggml-sycl.cpp ggml_backend_sycl_buffer_type_alloc_buffer.
    (
        "ggml_backend_sycl_buffer_type_alloc_buffer: can't allocate 6442450944 Bytes of memory on device\n",
        6442450944,
    ),
    # exllamav2/model.py (and exllamav3's loader), the auto-split giving up: the weights or the cache_size.
    ("RuntimeError: Insufficient VRAM in split for model and cache\n", None),
    # TensorRT (engine deserialization or an execution context, under TensorRT-LLM): the bytes it asked for.
    (
        (
            "[TRT] [W] Requested amount of GPU memory (3887181312 bytes) could not be allocated. There may not "
            "be enough free memory for allocation to succeed.\n"
        ),
        3887181312,
    ),
    # CTranslate2 src/cuda/utils.h (CUDA_CHECK): the CUDA error string.
    ("RuntimeError: CUDA failed with error out of memory\n", None),
]


@pytest.mark.parametrize("text,requested", READ_ONLY)
def test_a_message_without_mechanism_is_read_as_out_of_memory(text: str, requested: int | None) -> None:
    ooms = pasted.read(text, "evidence.log").of(OomMessage)
    assert ooms
    assert ooms[0].requested == requested


# --- near misses: the same families, another mechanism -----------------------------------------------------


def _signals(text: str) -> list[str]:
    return [s.name for s in pasted.read(text, "evidence.log").of(Signal)]


def test_ollamas_layout_refusal_without_a_forced_layer_count_does_not_name_the_weights() -> None:
    # llm/server.go: the backoff exhausted with ollama's own layer count (free memory misreported or changing,
    # or a context too large: https://github.com/ollama/ollama/issues/13283), not the user's num_gpu.
    text = "Error: 500 Internal Server Error: memory layout cannot be allocated\n"
    assert "load-model-failed" not in _signals(text)
    assert pasted.read(text, "evidence.log").of(OomMessage)


def test_ollamas_graph_failure_is_not_the_weights_or_the_cache() -> None:
    [row] = [r for r in CATALOG if r.name == "ollama-nomem-graph"]
    names = _signals(row.text)
    assert "prefill-tokens-dont-fit" in names
    assert not {"load-model-failed", "max-model-len-exceeds-kv"} & set(names)
    [oom] = pasted.read(row.text, "evidence.log").of(OomMessage)
    assert oom.requested == 4294967296


def test_tgi_prefill_refusal_is_not_the_max_total_tokens_refusal() -> None:
    prefill = (
        "Not enough memory to handle 4096 prefill tokens. You need to decrease `--max-batch-prefill-tokens`\n"
    )
    assert "max-model-len-exceeds-kv" not in _signals(prefill)
    assert "prefill-tokens-dont-fit" not in _signals("Error: Backend(NotEnoughMemory(32768))\n")


def test_host_memory_refused_while_the_context_is_created_is_the_context() -> None:
    # https://github.com/ollama/ollama/issues (a 256k context on a 14 GiB-free host, its KV in CPU buffers):
    # the same ggml_aligned_malloc line, after the context step began, is the KV cache's.
    text = (
        "llama_context: n_ctx = 262144\n"
        "ggml_aligned_malloc: insufficient memory (attempted to allocate 36000.00 MB)\n"
        "alloc_tensor_range: failed to allocate CPU buffer of size 37748736000\n"
        "llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache\n"
    )
    assert oomguard.diagnose(text).top == "max-model-len-exceeds-kv"


def test_mlx_lm_weights_at_most_the_working_set_are_not_called_too_large() -> None:
    # The warning fires from 90% of the working set: 20800 of 22906 MB fits, with little beside it.
    text = (
        "[WARNING] Generating with a model that requires 20800 MB which is close to the maximum recommended "
        "size of 22906 MB. This can be slow.\n"
        "libc++abi: terminating due to uncaught exception of type std::runtime_error: [METAL] Command buffer "
        "execution failed: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)\n"
    )
    assert oomguard.diagnose(text).top != "weights-dont-fit"


def test_llamacpp_request_longer_than_the_context_gives_both_sizes() -> None:
    [row] = [r for r in CATALOG if r.name == "llamacpp-exceeds-context"]
    [s] = pasted.read(row.text, "evidence.log").signals("max-model-len-exceeds-kv")
    assert (s.number("request_tokens"), s.number("max_model_len")) == (9100, 8192)


def test_ggmls_host_allocation_gives_what_it_asked_for() -> None:
    # ggml/src/ggml.c ggml_aligned_malloc prints MB of 2^20 bytes.
    [row] = [r for r in CATALOG if r.name == "ggml-aligned-malloc"]
    [s] = pasted.read(row.text, "evidence.log").signals("host-enomem")
    assert s.number("requested_bytes") == round(40652.88 * 2**20)


def test_trtllm_kv_pool_with_room_is_not_called_too_small() -> None:
    # the same kvCacheManager.cpp line with most of an 80 GiB device free for the pool
    text = (
        "[TensorRT-LLM][INFO] Memory usage when calculating max tokens in paged kv cache: total: 79.10 GiB, "
        "available: 70.48 GiB\n"
    )
    assert "no-kv-cache-memory" not in _signals(text)


def test_llamacpp_fit_warning_alone_names_no_buffer() -> None:
    # common/fit.cpp: the fit gave up (the load goes on with the user's -ngl); nothing failed yet.
    text = (
        "common_fit_params: failed to fit params to free device memory: n_gpu_layers already set by user to 999, "
        "abort\n"
    )
    names = _signals(text)
    assert not {"load-model-failed", "max-model-len-exceeds-kv", "prefill-tokens-dont-fit"} & set(names)
