"""A catalogue of the memory-failure messages vLLM and SGLang print, read as the engines' source code formats
them (realistic values filled in), each ranked by `oomguard.diagnose` alone and behind the engine's usual log
prefix. The class is the one the message's mechanism implies (the code and comments around it say which). Near
misses are messages that look alike but must not give that class.
"""

from __future__ import annotations

import pytest

import oomguard
from oomguard.errors import InputFormatError

# Log prefixes as the engines print them.
V1_PREFIX = "(EngineCore_DP0 pid=2417) ERROR 07-15 10:22:33 [core.py:700] "
V0_PREFIX = "ERROR 05-10 12:00:00 worker.py:123] "
V0_WARN = "WARNING 05-10 12:00:00 scheduler.py:1089] "
SGL_PREFIX = "[2025-07-02 07:41:58 TP0] "

# (id, message, class, prefix). Every message is quoted as its source formats it.
CATALOG: list[tuple[str, str, str, str]] = [
    # --- vLLM ---------------------------------------------------------------------------------------------
    # vllm/worker/worker.py raise_if_cache_size_invalid (V0, 0.2-0.10) and vllm/v1/core/kv_cache_utils.py
    # check_enough_kv_cache_memory (V1): no memory left for a single KV block.
    (
        "vllm-no-cache-blocks-v0",
        (
            "ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine."
        ),
        "kv-cache-insufficient-at-startup",
        V0_PREFIX,
    ),
    (
        "vllm-no-cache-blocks-v1",
        (
            "ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine. See "
            "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
        ),
        "kv-cache-insufficient-at-startup",
        V1_PREFIX,
    ),
    # vllm/worker/cpu_worker.py _validate_num_cpu_blocks (CPU backend, V0): the same for the CPU KV space.
    (
        "vllm-cpu-no-cache-blocks",
        (
            "ValueError: No available memory for the cache blocks. Try increasing "
            "`VLLM_CPU_KVCACHE_SPACE` when initializing the engine."
        ),
        "kv-cache-insufficient-at-startup",
        V0_PREFIX,
    ),
    # vllm/worker/worker.py raise_if_cache_size_invalid (V0): one request at max_model_len needs more blocks.
    (
        "vllm-max-seq-len-v0",
        (
            "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that "
            "can be stored in KV cache (21760). Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine."
        ),
        "max-model-len-exceeds-kv",
        V0_PREFIX,
    ),
    # vllm/v1/core/kv_cache_utils.py _check_enough_kv_cache_memory (V1).
    (
        "vllm-max-seq-len-v1",
        (
            "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB "
            "KV cache is needed, which is larger than the available KV cache memory (9.50 GiB). Based on "
            "the available memory, the estimated maximum model length is 77824. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine. See "
            "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
        ),
        "max-model-len-exceeds-kv",
        V1_PREFIX,
    ),
    # vllm/v1/core/kv_cache_utils.py (auto-fit max_model_len, vLLM >= 0.12): not even one token fits.
    (
        "vllm-cannot-auto-fit",
        (
            "ValueError: Cannot auto-fit max_model_len: not enough GPU memory available to serve even a "
            "single token. Try increasing `gpu_memory_utilization`."
        ),
        "kv-cache-insufficient-at-startup",
        V1_PREFIX,
    ),
    # vllm/core/scheduler.py _schedule_prefills (V0 block manager, AllocStatus.NEVER): the prompt needs more
    # blocks than the whole GPU pool holds.
    (
        "vllm-block-manager-capacity",
        (
            "Input prompt (40000 tokens) + lookahead slots (0) is too long and exceeds the capacity of "
            "block_manager"
        ),
        "max-model-len-exceeds-kv",
        V0_WARN,
    ),
    # vllm/core/scheduler.py _preempt (V0): the running batch outgrew the KV blocks.
    (
        "vllm-preempted-v0",
        (
            "Sequence group cmpl-7c1b-0 is preempted by PreemptionMode.RECOMPUTE mode because there is "
            "not enough KV cache space. This can affect the end-to-end performance. Increase "
            "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
            "total_num_cumulative_preemption=51"
        ),
        "kv-exhaustion-at-runtime",
        V0_WARN,
    ),
    # vllm/v1/worker/gpu_worker.py init_device / utils request_memory (vLLM >= 0.10): another tenant.
    (
        "vllm-free-memory-below-utilization",
        (
            "ValueError: Free memory on device (10.45/79.19 GiB) on startup is less than desired GPU "
            "memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory "
            "used by other processes."
        ),
        "other-process-or-shared-gpu",
        V1_PREFIX,
    ),
    # vllm/v1/worker/gpu_worker.py determine_available_memory (V1 0.8-0.10): free memory rose while profiling.
    (
        "vllm-profiling-error-v1",
        (
            "AssertionError: Error in memory profiling. Initial free memory 20.5 GiB, current free memory "
            "22.1 GiB. This happens when other processes sharing the same container release GPU memory "
            "while vLLM is profiling during initialization. To fix this, ensure consistent GPU memory "
            "allocation or isolate vLLM in its own container."
        ),
        "other-process-or-shared-gpu",
        V1_PREFIX,
    ),
    # vllm/worker/worker.py _assert_memory_footprint_increased_during_profiling (V0 0.6).
    (
        "vllm-profiling-error-v0",
        (
            "AssertionError: Error in memory profiling. Initial used memory 21474836480, currently used "
            "memory 20401094656. This happens when the GPU memory was not properly cleaned up before "
            "initializing the vLLM instance."
        ),
        "other-process-or-shared-gpu",
        V0_PREFIX,
    ),
    # vllm/v1/worker/gpu_model_runner.py _dummy_sampler_run (V1) and model_runner.py (V0).
    (
        "vllm-sampler-warmup",
        (
            "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. "
            "Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine."
        ),
        "sampler-or-logits",
        V1_PREFIX,
    ),
    # vllm/v1/worker/gpu_model_runner.py _dummy_pooler_run (V1, pooling models).
    (
        "vllm-pooler-warmup",
        (
            "RuntimeError: CUDA out of memory occurred when warming up pooler (task='embed') with 1024 "
            "dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when "
            "initializing the engine."
        ),
        "sampler-or-logits",
        V1_PREFIX,
    ),
    # vllm/v1/worker/gpu_model_runner.py load_model (vLLM >= 0.11).
    (
        "vllm-load-model-failed",
        (
            "Failed to load model - not enough GPU memory. Try lowering --gpu-memory-utilization to free "
            "memory for weights, increasing --tensor-parallel-size, or using --quantization. See "
            "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more tips. (original "
            "error: CUDA out of memory. Tried to allocate 112.00 MiB. GPU 0 has a total capacity of 31.36 "
            "GiB of which 53.06 MiB is free. Including non-PyTorch memory, this process has 31.30 GiB "
            "memory in use.)"
        ),
        "weights-dont-fit",
        "(EngineCore pid=36704) ERROR 04-07 15:58:28 [gpu_model_runner.py:4818] ",
    ),
    # vllm/config/compilation.py (vLLM >= 0.12): a hybrid model's recurrent-state blocks come from the KV
    # budget, one per running sequence.
    (
        "vllm-mamba-blocks",
        "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (856).",
        "kv-cache-insufficient-at-startup",
        V1_PREFIX,
    ),
    # vllm/config.py CacheConfig.verify_with_parallel_config (V0): the CPU swap space exceeds 70% of host RAM.
    (
        "vllm-swap-space",
        (
            "ValueError: Too large swap space. 64.00 GiB out of the 62.79 GiB total CPU memory is "
            "allocated for the swap space."
        ),
        "host-ram-oom",
        V0_PREFIX,
    ),
    # vllm/v1/engine/processor.py _validate_model_input (V1): one multimodal item's embeddings exceed the
    # encoder cache the profile sized.
    (
        "vllm-encoder-cache-size",
        (
            "ValueError: The decoder prompt contains a(n) video item with 21504 embedding tokens, which "
            "exceeds the pre-allocated encoder cache size 16384. Please reduce the input size or increase "
            "the encoder cache size by setting --limit-mm-per-prompt at startup."
        ),
        "multimodal-encoder",
        "(APIServer pid=1) ERROR 09-23 11:02:13 [serving_chat.py:257] ",
    ),
    # csrc/cumem_allocator.cpp (sleep mode, CuMemAllocator.wake_up): mapping the slept memory back failed.
    (
        "vllm-cumem-wake-up",
        "RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:139",
        "other-process-or-shared-gpu",
        V1_PREFIX,
    ),
    # vllm/worker/model_runner.py capture_model (V0, 0.3-0.10): the capture's own notice, then the OOM.
    (
        "vllm-capture-v0",
        (
            "Capturing the model for CUDA graphs. This may lead to unexpected consequences if the model "
            "is not static. To run the model in eager mode, set 'enforce_eager=True' or use "
            "'--enforce-eager' in the CLI.\n"
            "CUDA graphs can take additional 1~3 GiB memory per GPU. If you are running out of memory, "
            "consider decreasing `gpu_memory_utilization` or enforcing eager mode. You can also reduce "
            "the `max_num_seqs` as needed to decrease memory usage.\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total "
            "capacity of 23.64 GiB of which 11.06 MiB is free. Process 2281 has 23.62 GiB memory in use."
        ),
        "cuda-graph-capture",
        "INFO 05-10 12:00:00 model_runner.py:1060] ",
    ),
    # vllm/v1/worker/gpu_model_runner.py capture_model (V1, 0.10+): the capture's progress bar, then the OOM.
    (
        "vllm-capture-v1",
        (
            "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  45%|####5     | 30/67 "
            "[00:03<00:04,  9.10it/s]\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total "
            "capacity of 79.19 GiB of which 41.06 MiB is free. Including non-PyTorch memory, this process "
            "has 79.13 GiB memory in use."
        ),
        "cuda-graph-capture",
        V1_PREFIX,
    ),
    # vllm/multimodal/profiling.py get_decoder_dummy_data (0.7-0.9): the profile could not hold the worst-case
    # multimodal embeddings, so a real multimodal request goes past what was profiled.
    (
        "vllm-mm-profile-too-short",
        (
            "The sequence length used for profiling (max_num_batched_tokens / max_num_seqs = 5120) is too "
            "short to hold the multi-modal embeddings in the worst case (32768 tokens in total, out of "
            "which {'image': 16384, 'video': 16384} are reserved for multi-modal embeddings). This may "
            "cause certain multi-modal inputs to fail during inference, even when the input text is "
            "short. To avoid this, you should increase `max_model_len`, reduce `max_num_seqs`, and/or "
            "reduce `mm_counts`.\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.03 GiB. GPU 0 has a total "
            "capacity of 79.19 GiB of which 3.12 GiB is free. Including non-PyTorch memory, this process "
            "has 76.05 GiB memory in use."
        ),
        "multimodal-encoder",
        "WARNING 06-26 07:12:07 [profiling.py:245] ",
    ),
    # vllm/v1/worker/gpu_worker.py determine_available_memory (v0.21+): the CUDA-graph estimate is charged to
    # the budget before the KV cache; an estimate this large is what left no KV.
    (
        "vllm-graph-estimate-left-no-kv",
        (
            "Estimated CUDA graph memory: 21.30 GiB total\n"
            "Available KV cache memory: -2.10 GiB\n"
            "ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine."
        ),
        "cuda-graph-capture",
        "(EngineCore_DP0 pid=2417) INFO 07-15 10:21:50 [gpu_worker.py:298] ",
    ),
    # vllm/worker/worker.py determine_num_available_blocks (V0 0.6.4-0.6.6): the profile left a negative KV
    # share.
    (
        "vllm-profile-negative-kv-v0",
        (
            "Memory profiling takes 5.21 seconds\n"
            "the current vLLM instance can use total_gpu_memory (79.15GiB) x gpu_memory_utilization "
            "(0.90) = 71.24GiB\n"
            "model weights take 38.01GiB; non_torch_memory takes 0.50GiB; PyTorch activation peak memory "
            "takes 35.20GiB; the rest of the memory reserved for KV Cache is -2.47GiB.\n"
            "ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine."
        ),
        "kv-cache-insufficient-at-startup",
        "INFO 12-01 09:14:02 worker.py:265] ",
    ),
    # vllm/core/scheduler.py _swap_out (V0, swap preemption): the GPU blocks ran out and so did the CPU swap.
    (
        "vllm-swap-abort",
        (
            "RuntimeError: Aborted due to the lack of CPU swap space. Please increase the swap space to "
            "avoid this error."
        ),
        "kv-exhaustion-at-runtime",
        "ERROR 10-09 03:12:44 async_llm_engine.py:61] ",
    ),
    # vllm/lora/worker_manager.py _apply_adapters (V0 and V1): more distinct adapters in a step than GPU
    # slots.
    (
        "vllm-lora-slots",
        "RuntimeError: Number of requested LoRAs (9) is greater than the number of GPU LoRA slots (8).",
        "spec-decode-or-lora-extra",
        V1_PREFIX,
    ),
    # vllm/v1/worker/gpu_worker.py sleep (vLLM >= 0.7, RL rollouts): what stays in use after each sleep grows.
    (
        "vllm-sleep-residual-growth",
        (
            "Sleep mode freed 61.20 GiB memory, 3.20 GiB memory is still in use.\n"
            "Sleep mode freed 60.05 GiB memory, 5.14 GiB memory is still in use.\n"
            "Sleep mode freed 58.71 GiB memory, 7.42 GiB memory is still in use.\n"
            "RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:139"
        ),
        "memory-leak",
        "INFO 04-15 07:09:46 [gpu_worker.py:104] ",
    ),
    # DeepEP's buffer (deep_ep/buffer.py __init__), built by vLLM's all2all manager (distributed/
    # device_communicators/all2all.py) with VLLM_MOE_DP_CHUNK_SIZE dispatch tokens per rank; vLLM's expert
    # parallel deployment guide names this assertion.
    (
        "vllm-deepep-qp-depth",
        (
            "  File "
            '"/usr/local/lib/python3.12/dist-packages/vllm/distributed/device_communicators/all2all.py", '
            "line 218, in get_handle\n"
            "    buffer = deep_ep.Buffer(**buffer_kwargs)\n"
            '  File "/usr/local/lib/python3.12/dist-packages/deep_ep/buffer.py", line 98, in __init__\n'
            "    assert self.nvshmem_qp_depth >= (num_max_dispatch_tokens_per_rank + 1) * 2\n"
            "AssertionError"
        ),
        "ep-all2all-buffer",
        "(EngineCore_DP1 pid=5512) ERROR 09-13 10:01:12 [core.py:708] ",
    ),
    # vllm/v1/core/kv_cache_utils.py (V1 data parallel): each DP engine logs the pool it sized on its own GPU;
    # two that differ are ranks that profiled different free memory.
    (
        "vllm-dp-pools-differ",
        (
            "(EngineCore_DP0 pid=1201) INFO 07-15 10:20:11 [kv_cache_utils.py:1087] GPU KV cache size: "
            "1,052,352 tokens\n"
            "(EngineCore_DP1 pid=1202) INFO 07-15 10:20:12 [kv_cache_utils.py:1087] GPU KV cache size: "
            "412,160 tokens\n"
            "(EngineCore_DP1 pid=1202) ERROR 07-15 10:31:40 [core.py:700] torch.OutOfMemoryError: CUDA "
            "out of memory. Tried to allocate 1.12 GiB. GPU 1 has a total capacity of 79.19 GiB of which "
            "402.06 MiB is free."
        ),
        "dp-replica-kv-accounting",
        "",
    ),
    # vllm/executor/multiproc_worker_utils.py _run_worker_process (V0): the worker names the method that
    # raised; the method is the startup step (load_model: the weights; determine_num_available_blocks: the
    # profile run; initialize_cache: the KV blocks, then the CUDA graphs).
    (
        "vllm-worker-load-model",
        (
            "Exception in worker VllmWorkerProcess while processing method load_model.\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 1 has a total "
            "capacity of 23.64 GiB of which 512.06 MiB is free. Including non-PyTorch memory, this "
            "process has 23.13 GiB memory in use."
        ),
        "weights-dont-fit",
        "(VllmWorkerProcess pid=3825) ERROR 04-22 11:25:48 multiproc_worker_utils.py:226] ",
    ),
    (
        "vllm-worker-profile",
        (
            "Exception in worker VllmWorkerProcess while processing method "
            "determine_num_available_blocks.\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.50 GiB. GPU 1 has a total "
            "capacity of 23.64 GiB of which 5.12 GiB is free. Including non-PyTorch memory, this process "
            "has 18.51 GiB memory in use."
        ),
        "activation-peak",
        "(VllmWorkerProcess pid=3825) ERROR 04-22 11:25:48 multiproc_worker_utils.py:226] ",
    ),
    (
        "vllm-worker-initialize-cache",
        (
            "Exception in worker VllmWorkerProcess while processing method initialize_cache.\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 1 has a total "
            "capacity of 23.64 GiB of which 9.06 MiB is free. Including non-PyTorch memory, this process "
            "has 23.62 GiB memory in use."
        ),
        "cuda-graph-capture",
        "(VllmWorkerProcess pid=3825) ERROR 04-22 11:25:48 multiproc_worker_utils.py:226] ",
    ),
    # vllm/v1/worker/gpu_model_runner.py load_model (V1 speculative decoding): the drafter loads after the
    # target model, into what the target left.
    (
        "vllm-drafter-load",
        (
            "Loading drafter model...\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total "
            "capacity of 79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process "
            "has 78.15 GiB memory in use."
        ),
        "spec-decode-or-lora-extra",
        "(EngineCore_DP0 pid=2417) INFO 07-15 10:19:02 [gpu_model_runner.py:1959] ",
    ),
    # vllm/v1/engine/utils.py wait_for_engine_startup (V1): the engine core's exit code, -9 being SIGKILL (the
    # kernel's OOM killer while the weights pass through host memory).
    (
        "vllm-engine-core-killed",
        (
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
            "{'EngineCore_DP0': -9}"
        ),
        "host-ram-oom",
        "(APIServer pid=1) ",
    ),
    # vllm/model_executor/model_loader/weight_utils.py (the shard progress bar), then the shell's verdict.
    (
        "vllm-shards-killed",
        ("Loading safetensors checkpoint shards:  45% Completed | 9/20 [01:02<01:16,  6.95s/it]\nKilled"),
        "host-ram-oom",
        "",
    ),
    # vllm/v1/worker/gpu_model_runner.py profile_run -> _dummy_run (V1): the profile's forward at
    # max_num_batched_tokens is the activation peak.
    (
        "vllm-profile-run-frames",
        (
            "Traceback (most recent call last):\n"
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 243, '
            "in determine_available_memory\n"
            "    self.model_runner.profile_run()\n"
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line '
            "2420, in profile_run\n"
            "    = self._dummy_run(self.max_num_tokens, is_profile=True)\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB. GPU 0 has a total "
            "capacity of 79.19 GiB of which 3.12 GiB is free."
        ),
        "activation-peak",
        V1_PREFIX,
    ),
    # vllm/v1/sample/sampler.py compute_logprobs (V1): the logprobs of every sequence x the vocabulary, fp32.
    (
        "vllm-sampler-frames",
        (
            "Traceback (most recent call last):\n"
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line '
            "1630, in execute_model\n"
            "    sampler_output = self.sampler(\n"
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/sample/sampler.py", line 60, in '
            "forward\n"
            "    raw_logprobs = self.compute_logprobs(logits)\n"
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/sample/sampler.py", line 137, in '
            "compute_logprobs\n"
            "    return logits.log_softmax(dim=-1, dtype=torch.float32)\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.79 GiB. GPU 0 has a total "
            "capacity of 79.19 GiB of which 4.12 GiB is free."
        ),
        "sampler-or-logits",
        V1_PREFIX,
    ),
    # vllm/v1/worker/gpu_model_runner.py _execute_mm_encoder (V1): a request's images in the vision tower.
    (
        "vllm-mm-encoder-frames",
        (
            "Traceback (most recent call last):\n"
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line '
            "1432, in execute_model\n"
            "    self._execute_mm_encoder(scheduler_output)\n"
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line '
            "1021, in _execute_mm_encoder\n"
            "    curr_group_outputs = self.model.get_multimodal_embeddings(**batched_mm_inputs)\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.50 GiB. GPU 0 has a total "
            "capacity of 79.19 GiB of which 6.12 GiB is free."
        ),
        "multimodal-encoder",
        V1_PREFIX,
    ),
    # --- SGLang -------------------------------------------------------------------------------------------
    # python/sglang/srt/model_executor/model_runner.py init_memory_pool: the profiled token budget is <= 0.
    (
        "sglang-not-enough-memory",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        "kv-cache-insufficient-at-startup",
        SGL_PREFIX,
    ),
    (
        "sglang-not-enough-memory-current",
        (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current "
            "value: self.server_args.mem_fraction_static=0.5"
        ),
        "kv-cache-insufficient-at-startup",
        SGL_PREFIX,
    ),
    # python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py profile_max_num_token (0.5.x).
    (
        "sglang-weights-leave-no-kv",
        (
            "ValueError: Loaded weights leave no GPU memory for the KV cache under "
            "--mem-fraction-static=0.45. Raise --mem-fraction-static above 0.473 (minimum viable = 1 - "
            "available/pre = 0.4726). If using speculative decoding, draft weights are now counted."
        ),
        "kv-cache-insufficient-at-startup",
        SGL_PREFIX,
    ),
    # The same error when the weights took nearly all the memory free before they loaded: no fraction leaves
    # room for a KV pool and the activations, so the weights do not fit (its near miss: the row above).
    (
        "sglang-weights-fill-the-gpu",
        (
            "ValueError: Loaded weights leave no GPU memory for the KV cache under "
            "--mem-fraction-static=0.88. Raise --mem-fraction-static above 0.982 (minimum viable = 1 - "
            "available/pre = 0.9815). If using speculative decoding, draft weights are now counted."
        ),
        "weights-dont-fit",
        SGL_PREFIX,
    ),
    # python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py handle_max_mamba_cache (0.5.x).
    (
        "sglang-hybrid-state-cache",
        (
            "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
            "Computed max_mamba_cache_size=-31 (total_rest_memory=-8.63 GB, mamba_cache_per_req=140.78 "
            "MB). Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, (3) reduce "
            "--speculative-num-draft-tokens, or (4) use GPUs with more memory."
        ),
        "kv-cache-insufficient-at-startup",
        SGL_PREFIX,
    ),
    # python/sglang/srt/mem_cache/common.py alloc_for_extend / alloc_for_decode (0.5; schedule_batch.py
    # before), the pool's state from the tree cache's available_and_evictable_str.
    (
        "sglang-prefill-oom",
        (
            "RuntimeError: Prefill out of memory. Try to lower your batch size.\n"
            "Try to allocate 8192 tokens.\n"
            "Available tokens: 1203 (available_size=1203 + evictable_size=0)\n"
        ),
        "kv-exhaustion-at-runtime",
        SGL_PREFIX,
    ),
    (
        "sglang-decode-oom",
        (
            "RuntimeError: Decode out of memory. Try to lower your batch size.\n"
            "Try to allocate 64 tokens.\n"
            "Available tokens: 12 (available_size=12 + evictable_size=0)\n"
        ),
        "kv-exhaustion-at-runtime",
        SGL_PREFIX,
    ),
    # python/sglang/srt/mem_cache/common.py alloc_req_slots: the request-slot pool (ReqToTokenPool) is full.
    (
        "sglang-req-slots",
        (
            "RuntimeError: alloc_req_slots runs out of memory. Please set a smaller number for "
            "`--max-running-requests`. req_to_token_pool.available_size()=29, num_reqs=30, "
        ),
        "kv-exhaustion-at-runtime",
        SGL_PREFIX,
    ),
    # python/sglang/srt/managers/scheduler.py update_running_batch (0.3+): retraction notice.
    (
        "sglang-retract",
        ("KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.5000 -> 0.9000"),
        "kv-exhaustion-at-runtime",
        SGL_PREFIX,
    ),
    # python/sglang/srt/managers/tp_worker.py (0.1-0.3): the retraction notice before "KV cache pool is full".
    (
        "sglang-decode-oom-happened",
        "Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.4000 -> 0.7000",
        "kv-exhaustion-at-runtime",
        "[gpu_id=0] ",
    ),
    # python/sglang/srt/model_executor/cuda_graph_runner.py __init__: CUDA_GRAPH_CAPTURE_FAILED_MSG.
    (
        "sglang-capture-failed",
        (
            "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 "
            "has a total capacity of 79.10 GiB of which 1.02 GiB is free.\n"
            "Possible solutions:\n"
            "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
            "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
            "3. disable torch compile by not using --enable-torch-compile\n"
            "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
            "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
        ),
        "cuda-graph-capture",
        SGL_PREFIX,
    ),
    # python/sglang/srt/compilation/piecewise_context_manager.py (0.5): the prefill's piecewise graphs.
    (
        "sglang-piecewise-capture-failed",
        (
            "Piecewise CUDA Graph failed with error: CUDA out of memory. Tried to allocate 2.00 GiB. GPU "
            "0 has a total capacity of 79.10 GiB of which 1.21 GiB is free.\n"
            "To work around this error, add --disable-piecewise-cuda-graph to your launch command.\n"
        ),
        "cuda-graph-capture",
        SGL_PREFIX,
    ),
    # python/sglang/srt/model_executor/model_runner.py init_torch_distributed: free memory differs per GPU.
    (
        "sglang-unbalanced",
        (
            "RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other "
            "processes. min_per_gpu_memory=16.28, local_gpu_memory=46.81, local_gpu_memory * 0.9=42.129"
        ),
        "other-process-or-shared-gpu",
        SGL_PREFIX,
    ),
    # python/sglang/srt/managers/scheduler.py check_memory (idle self-check).
    (
        "sglang-kv-leak",
        (
            "ValueError: token_to_kv_pool_allocator memory leak detected! "
            "self.max_total_num_tokens=1915816, available_size=1835128, evictable_size=52280, "
            "protected_size=26360"
        ),
        "memory-leak",
        SGL_PREFIX,
    ),
    (
        "sglang-req-leak",
        "ValueError: req_to_token_pool memory leak detected! available_size=57, total_size=64",
        "memory-leak",
        SGL_PREFIX,
    ),
    # python/sglang/srt/mem_cache/memory_pool_host.py HostKVCache.__init__ (HiCache host pool).
    (
        "sglang-hicache-host",
        (
            "ValueError: Not enough host memory available. Requesting 412.32 GB but only have 187.55 GB "
            "free. Please reduce the size of the hierarchical cache."
        ),
        "host-ram-oom",
        SGL_PREFIX,
    ),
    # python/sglang/srt/model_executor/cuda_graph_runner.py (0.2-0.3): the older list of remedies.
    (
        "sglang-capture-failed-old",
        (
            "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 256.00 MiB. GPU "
            "0 has a total capacity of 23.64 GiB of which 118.06 MiB is free.\n"
            "Possible solutions:\n"
            "1. disable cuda graph by --disable-cuda-graph\n"
            "2. set --mem-fraction-static to a smaller value\n"
            "3. disable torch compile by not using --enable-torch-compile\n"
            "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
        ),
        "cuda-graph-capture",
        SGL_PREFIX,
    ),
    # python/sglang/srt/model_executor/cuda_graph_runner.py capture: its progress bar, then the OOM.
    (
        "sglang-capturing-batches",
        (
            "Capture cuda graph begin. This can take up to several minutes. avail mem=3.21 GB\n"
            "Capturing batches (bs=160 avail_mem=0.42 GB):  18%|#8        | 6/33 [00:02<00:10,  "
            "2.55it/s]\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 640.00 MiB. GPU 0 has a total "
            "capacity of 79.10 GiB of which 412.06 MiB is free."
        ),
        "cuda-graph-capture",
        SGL_PREFIX,
    ),
    # python/sglang/srt/model_executor/model_runner.py load_model: the weights do not fit what was free.
    (
        "sglang-load-weight-oom",
        (
            "Load weight begin. avail mem=21.53 GB\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 0 has a total "
            "capacity of 23.64 GiB of which 301.06 MiB is free. Including non-PyTorch memory, this "
            "process has 23.33 GiB memory in use."
        ),
        "weights-dont-fit",
        SGL_PREFIX,
    ),
    # torch_memory_saver (SGLang's sleep mode, resumed by verl/slime after a training step): cu_mem_create
    # could not map the released memory back (csrc/utils.h CURESULT_CHECK, 2 = CUDA_ERROR_OUT_OF_MEMORY).
    (
        "sglang-memory-saver-resume",
        (
            "[torch_memory_saver.cpp] CUresult error: 2 (out of memory)  file=csrc/utils.h "
            "func=cu_mem_create line=194"
        ),
        "other-process-or-shared-gpu",
        SGL_PREFIX,
    ),
    # DeepEP's low-latency dispatch buffer (csrc/deep_ep.cpp), reached by SGLang's CUDA-graph capture at a
    # batch larger than num_max_dispatch_tokens_per_rank.
    (
        "sglang-deepep-dispatch",
        (
            "RuntimeError: Failed: Assertion error /sgl-workspace/DeepEP/csrc/deep_ep.cpp:1105 'x.size(0) "
            "== topk_idx.size(0) and x.size(0) <= num_max_dispatch_tokens_per_rank'\n"
            "Exception: Capture cuda graph failed: Failed: Assertion error "
            "/sgl-workspace/DeepEP/csrc/deep_ep.cpp:1105"
        ),
        "ep-all2all-buffer",
        SGL_PREFIX,
    ),
]

# Messages that look like the ones above but whose mechanism is another (or no) memory class.
NEAR_MISSES: list[tuple[str, str, str]] = [
    # vllm/v1/engine/utils.py: an engine core that died of SIGILL (-4, a CPU without the instructions the
    # build needs) was not killed for memory.
    (
        "vllm-engine-core-sigill",
        (
            "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. "
            "Failed core proc(s): {'EngineCore_DP0': -4}"
        ),
        "host-ram-oom",
    ),
    # python/sglang/srt/model_executor/cuda_graph_runner.py: a capture that failed building a kernel (no
    # nvcc), not for memory; the remedies it lists name --mem-fraction-static all the same.
    (
        "sglang-capture-failed-build",
        (
            "[2025-07-02 07:41:58 TP0] Exception: Capture cuda graph failed: Ninja build failed.\n"
            "Possible solutions:\n"
            "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
            "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
            "3. disable torch compile by not using --enable-torch-compile\n"
            "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
        ),
        "cuda-graph-capture",
    ),
    # python/sglang/srt/compilation/piecewise_context_manager.py: a tracing error in the piecewise capture.
    (
        "sglang-piecewise-trace-error",
        (
            "[2025-07-02 07:41:58 TP0] Piecewise CUDA Graph failed with error: 'typing.Union' object has "
            "no attribute '__module__'\n"
            "To work around this error, add --disable-piecewise-cuda-graph to your launch command.\n"
        ),
        "cuda-graph-capture",
    ),
    # vllm/core/scheduler.py _schedule_prefills: the prompt is longer than max_model_len itself (a length
    # limit, not the KV pool).
    (
        "vllm-prompt-over-limit",
        (
            "WARNING 05-10 12:00:00 scheduler.py:1089] Input prompt (40000 tokens) is too long and "
            "exceeds limit of 32768"
        ),
        "max-model-len-exceeds-kv",
    ),
    # vllm/config.py ModelConfig.get_and_verify_max_len: a max_model_len above the model's own is a
    # configuration error, not the KV pool.
    (
        "vllm-max-len-above-derived",
        (
            "ValueError: User-specified max_model_len (131072) is greater than the derived max_model_len "
            "(max_position_embeddings=32768 or model_max_length=None in model's config.json). This may "
            "lead to incorrect model outputs or CUDA errors. To allow overriding this maximum, set the "
            "env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
        ),
        "max-model-len-exceeds-kv",
    ),
    # python/sglang/srt/managers/tokenizer_manager.py _validate_token_len: a prompt above the context length.
    (
        "sglang-input-over-context",
        (
            "[2025-07-02 07:41:58 TP0] ValueError: The input (40000 tokens) is longer than the model's "
            "context length (32768 tokens)."
        ),
        "max-model-len-exceeds-kv",
    ),
]


def _lines(message: str, prefix: str) -> str:
    return "\n".join(prefix + line if line else line for line in message.split("\n"))


@pytest.mark.parametrize(("name", "message", "cls", "prefix"), CATALOG, ids=[row[0] for row in CATALOG])
def test_the_message_alone_ranks_its_class_first(name: str, message: str, cls: str, prefix: str) -> None:
    assert oomguard.diagnose(message).top == cls


@pytest.mark.parametrize(("name", "message", "cls", "prefix"), CATALOG, ids=[row[0] for row in CATALOG])
def test_the_message_behind_its_log_prefix_ranks_its_class_first(
    name: str, message: str, cls: str, prefix: str
) -> None:
    assert oomguard.diagnose(_lines(message, prefix)).top == cls


@pytest.mark.parametrize(("name", "text", "cls"), NEAR_MISSES, ids=[row[0] for row in NEAR_MISSES])
def test_a_near_miss_does_not_give_the_class(name: str, text: str, cls: str) -> None:
    try:
        top = oomguard.diagnose(text).top
    except InputFormatError:  # no memory failure read at all
        top = None
    assert top != cls


# The V0 scheduler's refusal comes while serving: the stats lines before it do not make it a runtime-only
# class.
SERVING_THEN_REFUSED = """INFO 05-10 12:00:00 llm_engine.py:447] # GPU blocks: 2048, # CPU blocks: 2048
INFO 05-10 12:00:05 api_server.py:219] vLLM API server version 0.5.4
INFO 05-10 12:03:10 metrics.py:396] Avg prompt throughput: 812.4 tokens/s, Avg generation throughput: 41.2 tokens/s, Running: 3 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 12.5%, CPU KV cache usage: 0.0%.
WARNING 05-10 12:03:12 scheduler.py:1089] Input prompt (32760 tokens) + lookahead slots (0) is too long and exceeds the capacity of block_manager
"""  # noqa: E501


def test_the_block_managers_refusal_while_serving_is_the_pool_below_one_request() -> None:
    assert oomguard.diagnose(SERVING_THEN_REFUSED).top == "max-model-len-exceeds-kv"


def test_a_one_line_message_longer_than_a_file_name_is_read_as_text() -> None:
    # The API first asks whether a one-line argument is a path; a line past NAME_MAX (255) made the OS refuse
    # the question (ENAMETOOLONG) instead of answering no.
    line = V1_PREFIX + {row[0]: row[1] for row in CATALOG}["vllm-max-seq-len-v1"]
    assert "\n" not in line and len(line) > 255
    assert oomguard.diagnose(line).top == "max-model-len-exceeds-kv"
