"""Other engines' memory failures read as typed facts: llama.cpp / ollama / ik_llama.cpp, systemd's verdict on
a service the OOM killer hit, the kernel's memory-cgroup usage line. Each text is real, from the public thread
cited above it; the step it failed in decides the class, read from the engine's own lines."""

from __future__ import annotations

from tests.diagnosis import pasted

import oomguard
from oomguard.diagnosis.evidence import Evidence, Frame, HostMemory, OomMessage, Signal
from oomguard.units import GiB, MiB


def read(text: str) -> Evidence:
    return pasted.read(text, "evidence.log")


def signals(evidence: Evidence, name: str) -> list[Signal]:
    return evidence.signals(name)


# --- llama.cpp / ollama ----------------------------------------------------------------------------------

# https://github.com/ggml-org/llama.cpp/issues/8101: no -c given, the context defaults to the training length.
LLAMACPP_KV_INIT = """llama_new_context_with_model: n_ctx      = 1048576
llama_new_context_with_model: n_batch    = 2048
llama_new_context_with_model: n_ubatch   = 512
llama_new_context_with_model: flash_attn = 0
llama_new_context_with_model: freq_base  = 2804339712.0
llama_new_context_with_model: freq_scale = 1
ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 137438953504
llama_kv_cache_init: failed to allocate buffer for kv cache
llama_new_context_with_model: llama_kv_cache_init() failed for self-attention cache
"""


def test_a_kv_buffer_that_fails_while_the_context_is_created_is_the_context_length():
    evidence = read(LLAMACPP_KV_INIT)
    [s] = signals(evidence, "max-model-len-exceeds-kv")
    assert s.where.line == 7  # the first failed allocation, after the n_ctx line
    assert s.number("max_model_len") == 1048576
    assert s.number("requested_bytes") == 137438953504
    assert oomguard.diagnose(LLAMACPP_KV_INIT).top == "max-model-len-exceeds-kv"


# https://github.com/ollama/ollama/issues/10735: 20 parallel slots x 32768 = a 655360-token KV on an H100; the
# next buffer (the compute buffer, also sized by the context) cannot be allocated.
OLLAMA_PARALLEL_CTX = """May 16 15:11:15 myH100VM ollama[1405]: llama_context: n_ctx_per_seq (32768) < n_ctx_train (131072) -- the full capacity of the model will not be utilized
May 16 15:11:15 myH100VM ollama[1405]: llama_kv_cache_unified: kv_size = 655360, type_k = 'f16', type_v = 'f16', n_layer = 40, can_shift = 1, padding = 32
May 16 15:11:15 myH100VM ollama[1405]: llama_kv_cache_unified:      CUDA0 KV buffer size = 51200.00 MiB
May 16 15:11:15 myH100VM ollama[1405]: llama_kv_cache_unified: KV self size  = 51200.00 MiB, K (f16): 25600.00 MiB, V (f16): 25600.00 MiB
May 16 15:11:15 myH100VM ollama[1405]: ggml_backend_cuda_buffer_type_alloc_buffer: allocating 42256.00 MiB on device 0: cudaMalloc failed: out of memory
"""  # noqa: E501


def test_ggml_cuda_allocation_gives_the_requested_bytes_and_the_context_step_gives_the_class():
    evidence = read(OLLAMA_PARALLEL_CTX)
    [oom] = evidence.of(OomMessage)
    assert (oom.requested, oom.device, oom.where.line) == (42256 * MiB, 0, 5)
    [s] = signals(evidence, "max-model-len-exceeds-kv")
    assert s.number("kv_buffer_bytes") == 51200 * MiB  # the KV buffer, not the "KV self size" summary
    assert oomguard.diagnose(OLLAMA_PARALLEL_CTX).top == "max-model-len-exceeds-kv"


# https://github.com/ggml-org/llama.cpp/issues/18181: --fit sized the text model, not the vision encoder's
# compute buffer; the projector's warm-up on its largest image fails.
LLAMACPP_MM_WARMUP = """load_hparams: model size:         2198.75 MiB
load_hparams: metadata size:      0.12 MiB
warmup: warmup with image size = 1472 x 1472
ggml_backend_cuda_buffer_type_alloc_buffer: allocating 372.08 MiB on device 0: cudaMalloc failed: out of memory
ggml_gallocr_reserve_n_impl: failed to allocate CUDA0 buffer of size 390156544
alloc_compute_meta: graph splits = 1, nodes = 853
"""  # noqa: E501


def test_a_failure_in_the_projector_warm_up_is_the_multimodal_encoder():
    evidence = read(LLAMACPP_MM_WARMUP)
    assert [s.where.line for s in signals(evidence, "milestone-mm-profile")] == [3]
    assert not signals(evidence, "max-model-len-exceeds-kv") and not signals(evidence, "load-model-failed")
    assert oomguard.diagnose(LLAMACPP_MM_WARMUP).top == "multimodal-encoder"


# https://github.com/ollama/ollama/issues/5958: a ~40 GB model on a 2 GB GPU with 8 GB of RAM.
OLLAMA_LOAD = (
    "Error: llama runner process has terminated: error loading model: unable to allocate backend buffer\n"
)


def test_an_allocation_that_fails_while_loading_the_model_is_the_weights():
    evidence = read(OLLAMA_LOAD)
    assert [s.where.line for s in signals(evidence, "load-model-failed")] == [1]
    assert oomguard.diagnose(OLLAMA_LOAD).top == "weights-dont-fit"


# https://github.com/ollama/ollama/issues/6283 (ollama collaborator: 128k context x 2 parallel = 31 GB of KV).
OLLAMA_CONTEXT = (
    "Error: llama runner process has terminated: error:failed to create context with model "
    "'C:\\Users\\razva\\.ollama\\blobs\\sha256-c4e04968e3ca697b947c4820d7d4e58873e9f93908a043e7280863b31019b7df'\n"
)


def test_ollama_failing_to_create_the_context_is_the_context_length():
    assert oomguard.diagnose(OLLAMA_CONTEXT).top == "max-model-len-exceeds-kv"


def test_an_allocation_failure_while_serving_is_not_read_as_the_context_length():
    # The server's own lines (llama.cpp tools/server) put the same allocation failure at runtime.
    text = (
        "llama_context: n_ctx = 32768\n"
        "llama_kv_cache: CUDA0 KV buffer size = 4096.00 MiB\n"
        "main: server is listening on http://127.0.0.1:8080 - starting the main loop\n"
        "srv  update_slots: all slots are idle\n"
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 1024.00 MiB on device 0: cudaMalloc failed: "
        "out of memory\n"
    )
    evidence = read(text)
    assert not signals(evidence, "max-model-len-exceeds-kv")
    assert [s.where.line for s in signals(evidence, "milestone-serving")] == [3]
    assert oomguard.diagnose(text).top != "max-model-len-exceeds-kv"


# ggml's CUDA check (ggml/src/ggml-cuda/ggml-cuda.cu, ggml_cuda_error) as ollama printed it; the function it
# names is where the allocation failed: instantiating a CUDA graph.
GGML_GRAPH_OOM = """Error: an error was encountered while running the model: CUDA error: out of memory
current device: 0, in function ggml_cuda_graph_evaluate_and_capture at //ml/backend/ggml/ggml/src/ggml-cuda/ggml-cuda.cu:4017
cudaGraphInstantiate(&graph->instance, graph->graph, __null, __null, 0)
//ml/backend/ggml/ggml/src/ggml-cuda/ggml-cuda.cu:99: CUDA error
"""  # noqa: E501


def test_ggml_cuda_check_names_the_failing_function_as_a_frame():
    evidence = read(GGML_GRAPH_OOM)
    [frame] = evidence.of(Frame)
    assert (frame.function, frame.lineno, frame.where.line) == (
        "ggml_cuda_graph_evaluate_and_capture",
        4017,
        2,
    )
    assert frame.code.startswith("cudaGraphInstantiate(")
    assert oomguard.diagnose(GGML_GRAPH_OOM).top == "cuda-graph-capture"


# --- host: systemd and the memory cgroup ------------------------------------------------------------------

# https://github.com/ollama/ollama/issues/9322 (maintainer: the kernel OOM killer; 128 GiB of fp16 weights
# with 14 of 81 layers offloaded leave ~114 GiB in a 128 GB host).
SYSTEMD_OOM = """Feb 24 11:16:31 adl systemd[1]: ollama.service: A process of this unit has been killed by the OOM killer.
Feb 24 11:16:32 adl systemd[1]: ollama.service: Failed with result 'oom-kill'.
Feb 24 11:16:32 adl systemd[1]: ollama.service: Consumed 32.964s CPU time, 123.9G memory peak.
"""  # noqa: E501


def test_systemd_reports_the_oom_kill_and_the_peak_in_binary_units():
    evidence = read(SYSTEMD_OOM)
    assert [s.where.line for s in signals(evidence, "kernel-oom-kill")] == [1, 2]
    [peak] = evidence.of(HostMemory)
    assert (peak.quantity, peak.scope) == ("peak", "ollama.service")
    assert abs(peak.value - 123.9 * GiB) < 1
    assert oomguard.diagnose(SYSTEMD_OOM).top == "host-ram-oom"


# https://github.com/triton-inference-server/server/issues/4154: a 128 MiB pod limit reached (failcnt 15691).
MEMCG_REPORT = """[44517.301476] memory: usage 131072kB, limit 131072kB, failcnt 15691
[44517.301477] memory+swap: usage 0kB, limit 9007199254740988kB, failcnt 0
[44517.301477] kmem: usage 19932kB, limit 9007199254740988kB, failcnt 0
[44517.301478] Memory cgroup stats for /kubepods/burstable/pod45dbec92-0481-4b70-b999-158b7cf2f909:
"""


def test_the_kernel_memcg_line_gives_usage_at_the_limit_and_ignores_swap_and_kmem():
    evidence = read(MEMCG_REPORT)
    values = {(h.quantity, h.where.line): h.value for h in evidence.of(HostMemory)}
    assert values == {("current", 1): 128 * MiB, ("limit", 1): 128 * MiB}
    assert oomguard.diagnose(MEMCG_REPORT).top == "host-ram-oom"


# --- TensorRT-LLM ----------------------------------------------------------------------------------------

# https://github.com/NVIDIA/TensorRT-LLM/issues/494: kv_cache_free_gpu_mem_fraction 0.2 leaves 693 tokens,
# fewer than one engine-max-length sequence.
TRTLLM_BELOW_ONE_SEQUENCE = """[TensorRT-LLM][INFO] Using 693 tokens in paged KV cache.
E1128 16:31:49.479096 227 backend_model.cc:634] ERROR: Failed to create instance: unexpected error when creating modelInstanceState: maxTokensInPagedKvCache must be large enough to process at least 1 sequence to completion (i.e. must be larger than beam_width * tokensPerBlock * maxBlocksPerSeq)
"""  # noqa: E501


def test_trtllm_pool_below_one_sequence_is_the_max_length_with_the_pool_tokens():
    evidence = read(TRTLLM_BELOW_ONE_SEQUENCE)
    [s] = signals(evidence, "max-model-len-exceeds-kv")
    assert (s.where.line, s.number("kv_cache_tokens")) == (2, 693)
    assert oomguard.diagnose(TRTLLM_BELOW_ONE_SEQUENCE).top == "max-model-len-exceeds-kv"


# https://github.com/NVIDIA/TensorRT-LLM/issues/2335: the executor's step fails to reshape its buffers.
TRTLLM_FORWARD = """[TensorRT-LLM][ERROR] Encountered an error in forwardAsync function: [TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, mMemPool->getPool(), mCudaStream->get()): out of memory (/home/work/xingwuFileSystem/24.10.15/TensorRT-LLM/cpp/tensorrt_llm/runtime/tllmBuffers.h:125)
1       0x7f1ddb698e13 void tensorrt_llm::common::check<cudaError>(cudaError, char const*, char const*, int) + 147
"""  # noqa: E501


def test_trtllm_forward_async_places_the_failure_at_runtime():
    evidence = read(TRTLLM_FORWARD)
    assert [s.where.line for s in signals(evidence, "milestone-serving")] == [1]
    assert [o.flavor for o in evidence.of(OomMessage)] == ["cuda-runtime"]
    assert oomguard.diagnose(TRTLLM_FORWARD).diagnosis.phase == "runtime"


# --- TGI ---------------------------------------------------------------------------------------------------

# https://github.com/huggingface/text-generation-inference/issues/866 (maintainer: "you forgot --num-shard 4,
# 1 V100 will not be enough for ul2").
TGI_SHARD_OOM = """torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 MiB (GPU 0; 15.77 GiB total capacity; 15.37 GiB already allocated; 13.62 MiB free; 15.77 GiB allowed; 15.40 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF
 rank=0
Error: ShardCannotStart
2023-08-17T10:23:27.032737Z ERROR text_generation_launcher: Shard 0 failed to start
2023-08-17T10:23:27.032758Z  INFO text_generation_launcher: Shutting down shards
"""  # noqa: E501


def test_tgi_shard_that_fails_to_start_after_an_oom_is_the_weights():
    evidence = read(TGI_SHARD_OOM)
    assert [s.where.line for s in signals(evidence, "load-model-failed")] == [3]
    assert oomguard.diagnose(TGI_SHARD_OOM).top == "weights-dont-fit"


def test_tgi_shard_that_fails_after_it_was_ready_is_not_the_weights():
    # The same launcher lines after the shard was ready and warming up (TGI launcher/src/main.rs).
    text = (
        "2024-04-19T11:05:25.868590Z  INFO shard-manager: text_generation_launcher: "
        "Shard ready in 60.1s rank=0\n"
        "2024-04-19T11:06:25.868590Z  INFO text_generation_router: router/src/main.rs:320: Warming up model\n"
        + TGI_SHARD_OOM
    )
    evidence = read(text)
    assert not signals(evidence, "load-model-failed")
    assert [s.name for s in evidence.signals() if s.name.startswith("milestone")] == [
        "milestone-weights-loaded",
        "milestone-profile",
    ]


# https://github.com/huggingface/text-generation-inference/issues/1356: the router admitted a prefill the
# block pool could not hold.
TGI_BLOCKS = """2023-12-18T02:36:52.142641Z ERROR batch{batch_size=1}:prefill:prefill{id=7571 size=1}:prefill{id=7571 size=1}: text_generation_client: router/client/src/lib.rs:33: Server error: Out of available cache blocks: asked 107, only 4 free blocks
"""  # noqa: E501


def test_tgi_out_of_cache_blocks_is_the_kv_pool_running_dry_while_serving():
    evidence = read(TGI_BLOCKS)
    assert [s.where.line for s in signals(evidence, "kv-pool-dry")] == [1]
    assert [s.where.line for s in signals(evidence, "milestone-serving")] == [1]
    assert oomguard.diagnose(TGI_BLOCKS).top == "kv-exhaustion-at-runtime"


# https://github.com/huggingface/text-generation-inference/issues/446 (maintainer: "You didn't mount the shm
# volume"): SIGBUS writing past a too-small /dev/shm.
TGI_SIGBUS = "Error: Download process was signaled to shutdown with signal 7\n"


def test_tgi_sigbus_is_host_shared_memory_and_sigkill_a_kill():
    assert [s.where.line for s in signals(read(TGI_SIGBUS), "host-enomem")] == [1]
    killed = read("Error: Shard process was signaled to shutdown with signal 9\n")
    assert [s.where.line for s in signals(killed, "host-killed")] == [1]
    assert not signals(killed, "host-enomem")
    assert oomguard.diagnose(TGI_SIGBUS).top == "host-ram-oom"


# --- LMDeploy TurboMind ------------------------------------------------------------------------------------

# https://github.com/InternLM/lmdeploy/issues/277 (maintainer: cache entries must be at least max_batch_size).
TURBOMIND_ENTRIES = """terminate called after throwing an instance of 'std::runtime_error'
  what():  [TM][ERROR] No enough cache entries. Assertion fail: /opt/tritonserver/lmdeploy/src/turbomind/models/llama/LlamaCacheManager.cc:62
"""  # noqa: E501


def test_turbomind_out_of_cache_entries_is_the_kv_pool_running_dry():
    assert [s.where.line for s in signals(read(TURBOMIND_ENTRIES), "kv-pool-dry")] == [2]
    assert oomguard.diagnose(TURBOMIND_ENTRIES).top == "kv-exhaustion-at-runtime"


# --- ExLlama -----------------------------------------------------------------------------------------------

# https://github.com/turboderp-org/exllamav2/issues/677: the model loads; the FP16 cache at Llama 3.1's
# default 131072-token max_seq_len does not fit.
EXLLAMA_CACHE = """ -- Loaded model in 9.7356 seconds
 -- Loading tokenizer...
Traceback (most recent call last):
  File "/home/ubuntu/exllamav2/test_inference.py", line 192, in <module>
    cache = ExLlamaV2Cache(model) if not model.tp_context else ExLlamaV2Cache_TP(model)
            ^^^^^^^^^^^^^^^^^^^^^
  File "/home/ubuntu/exllamav2/exllamav2/cache.py", line 256, in __init__
    self.create_state_tensors(copy_from, lazy)
  File "/home/ubuntu/exllamav2/exllamav2/cache.py", line 91, in create_state_tensors
    p_key_states = torch.zeros(self.shape_wk, dtype = self.dtype, device = device).contiguous()
                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 640.00 MiB.
"""


def test_exllama_oom_inside_the_cache_allocation_is_the_context_length():
    evidence = read(EXLLAMA_CACHE)
    assert [s.where.line for s in signals(evidence, "max-model-len-exceeds-kv")] == [12]
    assert oomguard.diagnose(EXLLAMA_CACHE).top == "max-model-len-exceeds-kv"


def test_exllama_oom_in_another_traceback_is_not_the_cache():
    cache_error = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 640.00 MiB."
    text = EXLLAMA_CACHE.replace(cache_error, "ValueError: shape mismatch") + (
        'Traceback (most recent call last):\n  File "/app/model.py", line 10, in forward\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.\n"
    )
    assert not signals(read(text), "max-model-len-exceeds-kv")


# https://github.com/theroyallab/tabbyAPI/issues/119: with CFG a request is two sequences; its 33 pages do not
# fit the whole 32-page cache (cache_size equal to max_seq_len).
EXLLAMA_JOB_PAGES = (
    "exception=AssertionError('Job requires 33 pages (only 32 available) and cannot be enqueued. Total cache "
    "allocated is 32 * 256 = 8192 tokens')>\n"
)


def test_a_job_larger_than_the_whole_paged_cache_is_the_context_length():
    [s] = signals(read(EXLLAMA_JOB_PAGES), "max-model-len-exceeds-kv")
    assert (s.number("pages_needed"), s.number("pages_in_cache")) == (33, 32)
    diagnosis = oomguard.diagnose(EXLLAMA_JOB_PAGES)
    assert diagnosis.top == "max-model-len-exceeds-kv"
    assert "max_seq_len" in diagnosis.causes[0].fixes[0].summary  # ExLlama's own option, not vLLM's


# https://github.com/FlashML-org/FreeToken-Web/issues/2: the engine's own startup check, a 27B model on 24 GB.
NOT_ENOUGH_FOR_KV = "AssertionError: Not enough memory for KV cache，try reducing --num-pages\n"


def test_an_engines_exception_that_the_kv_cache_does_not_fit_is_the_startup_pool():
    assert [s.where.line for s in signals(read(NOT_ENOUGH_FOR_KV), "no-kv-cache-memory")] == [1]
    assert oomguard.diagnose(NOT_ENOUGH_FOR_KV).top == "kv-cache-insufficient-at-startup"


def test_a_reporters_guess_that_the_kv_cache_does_not_fit_is_no_engine_error():
    # the same words in a sentence (the reporter's reading of an OOM), not an exception's message
    text = "I think there is not enough memory for KV cache, so I lowered the context.\n"
    assert not signals(read(text), "no-kv-cache-memory")


# https://github.com/turboderp-org/exllamav3/issues/50: the auto-split gives up, no sizes.
EXLLAMA_SPLIT = "RuntimeError: Insufficient VRAM in split for model and cache\n"


def test_exllama_autosplit_refusal_is_an_allocation_failure():
    [oom] = read(EXLLAMA_SPLIT).of(OomMessage)
    assert (oom.flavor, oom.where.line) == ("engine", 1)


# --- Metal -------------------------------------------------------------------------------------------------

# https://github.com/ml-explore/mlx-lm/issues/1390
METAL_OOM = """libc++abi: terminating due to uncaught exception of type std::runtime_error: [METAL] Command buffer execution failed: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)
zsh: abort      mlx_lm.server --model mlx-community/Qwen3.5-4B-MLX-8bit
"""  # noqa: E501


def test_metal_command_buffer_out_of_memory_is_a_gpu_oom():
    evidence = read(METAL_OOM)
    [oom] = evidence.of(OomMessage)
    assert (oom.flavor, oom.where.line, oom.requested) == ("engine", 1, None)
    assert oomguard.diagnose(METAL_OOM).top is not None


def test_metal_malloc_beyond_the_buffer_limit_gives_the_requested_bytes():
    # mlx/backend/metal/allocator.cpp's message.
    text = (
        "[metal::malloc] Attempting to allocate 137438953472 bytes which is greater than the maximum allowed "
        "buffer size of 77309411328 bytes.\n"
    )
    [oom] = read(text).of(OomMessage)
    assert oom.requested == 137438953472


# --- SGLang's own memory checks, pinned host memory --------------------------------------------------------

# https://github.com/sgl-project/sglang/issues/6888: the scheduler's idle self-check finds more free KV slots
# than the pool has (slots returned twice), and the server dies.
SGLANG_LEAK_CHECK = """ValueError: token_to_kv_pool_allocator memory leak detected! available_size=3189424, protected_size=0, self.max_total_num_tokens=3185200
self.token_to_kv_pool_allocator.available_size()=2864304
self.tree_cache.evictable_size()=325120


[2025-06-06 01:56:27] Received sigquit from a child process. It usually means the child failed.
./run.sh: line 22: 103525 Killed                  python -m sglang.launch_server --host 0.0.0.0 --port 8188 --dtype auto --mem-fraction-static 0.95 --tp-size 2 --max-running-requests 48
"""  # noqa: E501


def test_sglang_allocator_leak_check_is_a_leak_with_its_token_counts():
    [s] = signals(read(SGLANG_LEAK_CHECK), "engine-leak-check")
    assert (s.where.line, s.number("available_tokens"), s.number("total_tokens")) == (1, 3189424, 3185200)
    assert oomguard.diagnose(SGLANG_LEAK_CHECK).top == "memory-leak"


# https://github.com/sgl-project/sglang/pull/28683: the draft model's weights now count against the fraction.
SGLANG_NO_KV = """ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.9.
  at model_runner_kv_cache_mixin.py:_profile_available_bytes
"""  # noqa: E501


def test_sglang_weights_leaving_no_kv_is_the_kv_pool_at_startup():
    assert [s.where.line for s in signals(read(SGLANG_NO_KV), "sglang-not-enough-memory")] == [1]
    assert oomguard.diagnose(SGLANG_NO_KV).top == "kv-cache-insufficient-at-startup"


# https://github.com/SemiAnalysisAI/InferenceX/pull/2146: ROCm's per-process pinnable-memory ceiling.
PIN_FAILED = (
    "RuntimeError: cudaHostRegister failed (rc=1, invalid argument) for ptr=0x6f6388400000 "
    "size=531470745600; host buffer is not pinned and device transfers may silently return stale data\n"
)


def test_failing_to_pin_host_memory_is_host_memory():
    assert [s.where.line for s in signals(read(PIN_FAILED), "host-enomem")] == [1]
    assert oomguard.diagnose(PIN_FAILED).top == "host-ram-oom"


# --- allocator formats of other devices and libraries -----------------------------------------------------

# https://github.com/vllm-project/vllm-ascend/issues/1127: torch_npu keeps PyTorch's older format with a
# "current active" term.
NPU_OOM = (
    "(NPURayWorkerWrapper pid=45198) ERROR 06-09 06:57:48 worker_base.py:581] RuntimeError: NPU out of "
    "memory. Tried to allocate 30.00 MiB (NPU 5; 60.96 GiB total capacity; 60.34 GiB already allocated; "
    "60.34 GiB current active; 15.87 MiB free; 60.60 GiB reserved in total by PyTorch) If reserved memory "
    "is >> allocated memory try setting max_split_size_mb to avoid fragmentation.\n"
)


def test_ascend_npu_oom_gives_the_device_total_free_and_reservation():
    [oom] = read(NPU_OOM).of(OomMessage)
    assert (oom.flavor, oom.device, oom.requested) == ("torch-old", 5, 30 * MiB)
    assert (oom.total, oom.free, oom.allocated) == (
        round(60.96 * GiB),
        round(15.87 * MiB),
        round(60.34 * GiB),
    )
    assert oom.reserved_unallocated == round(60.60 * GiB) - round(60.34 * GiB)


# TensorRT's allocator (defaultAllocator.cpp, executionContext.cpp) as a TensorRT engine user quoted it in
# styler00dollar/VSGAN-tensorrt-docker's docs; TensorRT-LLM engines print the same lines.
TENSORRT_OOM = """1: [defaultAllocator.cpp::allocate::19] Error Code 1: Cuda Runtime (out of memory)
Requested amount of GPU memory (3887181312 bytes) could not be allocated. There may not be enough free memory for allocation to succeed.
2: [executionContext.cpp::ExecutionContext::470] Error Code 2: OutOfMemory (no further information)
Segmentation fault
"""  # noqa: E501


def test_tensorrt_allocator_gives_the_requested_bytes():
    sized = [(o.where.line, o.requested) for o in read(TENSORRT_OOM).of(OomMessage) if o.flavor == "engine"]
    assert sized == [(2, 3887181312), (3, None)]


def test_llama_cpp_metal_out_of_memory_status_is_a_gpu_oom():
    # llama.cpp's Metal backend (ggml-metal.m) prints the IOKit status on its own line.
    text = (
        "ggml_metal_graph_compute: command buffer 0 failed with status 5\n"
        "error: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)\n"
    )
    assert [(o.flavor, o.where.line) for o in read(text).of(OomMessage)] == [("engine", 2)]


def test_llama_cpp_tensor_buffer_failing_while_the_model_loads_is_the_weights():
    # llama.cpp src/llama-model.cpp / ggml-alloc.c lines of a load that does not fit.
    text = (
        "load_tensors: loading model tensors, this can take a while... (mmap = true)\n"
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 22880.12 MiB on device 0: cudaMalloc failed: "
        "out of memory\n"
        "alloc_tensor_range: failed to allocate CUDA0 buffer of size 23991808000\n"
        "llama_model_load: error loading model: unable to allocate CUDA0 buffer\n"
    )
    evidence = read(text)
    [s] = signals(evidence, "load-model-failed")
    assert (s.where.line, s.number("requested_bytes")) == (2, round(22880.12 * MiB))
    assert oomguard.diagnose(text).top == "weights-dont-fit"


# ggml's Vulkan backend (ggml-vulkan.cpp) loading a 25 GB model onto a 12 GB card, as llama.cpp prints it.
VULKAN_LOAD = """load_tensors: loading model tensors, this can take a while... (mmap = true)
ggml_vulkan: Device memory allocation of size 1037832192 failed.
ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory
0.02.468.179 E alloc_tensor_range: failed to allocate Vulkan0 buffer of size 1037832192
"""


def test_vulkan_allocation_failure_gives_its_size_and_the_load_step():
    evidence = read(VULKAN_LOAD)
    assert (2, 1037832192) in [(o.where.line, o.requested) for o in evidence.of(OomMessage)]
    [s] = signals(evidence, "load-model-failed")
    assert (s.where.line, s.number("requested_bytes")) == (2, 1037832192)
    assert oomguard.diagnose(VULKAN_LOAD).top == "weights-dont-fit"


# LMDeploy's PyTorch engine (lmdeploy/pytorch/engine/executor/base.py) when nothing is left for its blocks.
LMDEPLOY_NO_KV = "RuntimeError: No enough gpu memory for kv cache.\n"


def test_lmdeploy_pytorch_engine_without_kv_memory_is_the_kv_pool_at_startup():
    assert [s.where.line for s in signals(read(LMDEPLOY_NO_KV), "no-kv-cache-memory")] == [1]
    assert oomguard.diagnose(LMDEPLOY_NO_KV).top == "kv-cache-insufficient-at-startup"
