"""The startup step a failure is in, and the engines' own words for a KV pool too small to start (issue 8):
each mechanism from the engine's code or a public thread, with a near-miss text of another class that must
not be taken for it."""

from __future__ import annotations

import io

from tests.diagnosis.pasted import ranked

from oomguard.diagnosis.evidence import Evidence, Signal, StartupNumber
from oomguard.diagnosis.read import read_one


def signals(text: str) -> set[str]:
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(text.encode()), evidence)
    return {s.name for s in evidence.of(Signal)}


# vLLM v0.12+ vllm/config/compilation.py (resolve_cudagraph_mode_and_sizes, see vllm-project/vllm#34094): a
# hybrid model's recurrent-state pool holds one block per running sequence, sized from the KV budget.
STATE_BLOCKS_REFUSAL = (
    "(EngineCore pid=196) ValueError: max_num_seqs (256) exceeds available Mamba cache blocks (73). Each "
    "decode sequence requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower "
    "max_num_seqs to at most 73 or increase gpu_memory_utilization."
)
# A sentence about the same pool that reports no refusal (a sizing note, not a failure).
STATE_BLOCKS_SIZING_NOTE = (
    "With --max-num-seqs 64 the engine starts fine: the hybrid model has 122 Mamba cache blocks at "
    "--gpu-memory-utilization 0.9, so 64 sequences fit."
)


def test_too_few_state_blocks_for_max_num_seqs_is_the_pool_at_startup() -> None:
    causes = ranked(STATE_BLOCKS_REFUSAL)
    assert causes[0] == "kv-cache-insufficient-at-startup"
    assert "cuda-graph-capture" not in causes[:1]
    assert "state-blocks-below-max-seqs" not in signals(STATE_BLOCKS_SIZING_NOTE)


# https://github.com/vllm-project/vllm/issues/14095 (V0 multiprocessing workers): one worker's OOM, another's
# wrapper naming the method it was running.
LOAD_MODEL_METHOD = (
    "(VllmWorkerProcess pid=195295) ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242] "
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 2 has a total capacity of "
    "14.62 GiB of which 3.31 MiB is free. Including non-PyTorch memory, this process has 14.61 GiB memory in "
    "use. Of the allocated memory 14.42 GiB is allocated by PyTorch, and 23.14 MiB is reserved by PyTorch "
    "but unallocated.\n"
    "(VllmWorkerProcess pid=195297) ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242] Exception in worker "
    "VllmWorkerProcess while processing method load_model.\n"
)
# vLLM v0.6-v0.10 vllm/worker/worker_base.py (the Ray workers' wrapper, V0 and V1): the same step, quoted.
RAY_LOAD_MODEL_METHOD = (
    "(RayWorkerWrapper pid=22792) ERROR 12-08 10:40:08 worker_base.py:620] Error executing method "
    "'load_model'. This might cause deadlock in distributed execution.\n"
    "(RayWorkerWrapper pid=22792) ERROR 12-08 10:40:08 worker_base.py:620] torch.OutOfMemoryError: CUDA out "
    "of memory. Tried to allocate 112.00 MiB. GPU 0 has a total capacity of 23.65 GiB of which 61.06 MiB is "
    "free.\n"
)
# The same wrapper failing in device initialisation (NCCL set-up), as vLLM's troubleshooting page quotes it:
# no memory step is named.
RAY_INIT_DEVICE_NCCL = (
    "Error executing method 'init_device'. This might cause deadlock in distributed execution.\n"
    "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)\n"
)
# vLLM V0 Worker.initialize_cache first checks the pool (raise_if_cache_size_invalid): its own error names the
# pool, whatever the method (https://github.com/vllm-project/vllm/issues/4429).
INITIALIZE_CACHE_NO_BLOCKS = (
    "ERROR 05-02 10:01:12 worker_base.py:145] Error executing method initialize_cache. This might cause "
    "deadlock in distributed execution.\n"
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    "initializing the engine.\n"
)


def test_the_worker_method_that_raised_places_the_failure() -> None:
    assert ranked(LOAD_MODEL_METHOD)[0] == "weights-dont-fit"
    assert ranked(RAY_LOAD_MODEL_METHOD)[0] == "weights-dont-fit"
    assert ranked(INITIALIZE_CACHE_NO_BLOCKS)[0] == "kv-cache-insufficient-at-startup"
    assert ranked(RAY_INIT_DEVICE_NCCL)[0] != "weights-dont-fit"


SGLANG_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.03 GiB. GPU 0 has a total capacity of "
    "79.11 GiB of which 312.00 MiB is free. Including non-PyTorch memory, this process has 78.79 GiB memory "
    "in use. Of the allocated memory 74.12 GiB is allocated by PyTorch, and 1.05 GiB is reserved by PyTorch "
    "but unallocated.\n"
)
# SGLang's startup lines as its model runner and EAGLE worker print them (sglang/srt/model_executor/
# model_runner.py and cuda_graph_runner.py, sglang/srt/speculative/eagle_worker.py): the target's graphs end,
# the draft model's graphs begin and fail.
SGLANG_TARGET_CAPTURED = (
    "[2025-08-08 03:34:38] Memory pool end. avail mem=2.43 GB\n"
    "[2025-08-08 03:34:38] Capture cuda graph begin. This can take up to several minutes. avail mem=1.80 GB\n"
    "[2025-08-08 03:34:38] Capture cuda graph bs [1, 2, 4, 8]\n"
    "Capturing batches (bs=1 avail_mem=1.72 GB): 100%|█████████████████████| 4/4 [00:18<00:00,  4.57s/it]\n"
    "[2025-08-08 03:34:56] Capture cuda graph end. Time elapsed: 18.28 s. mem usage=0.11 GB. avail mem=1.70 "
    "GB.\n"
)
SGLANG_DRAFT_CAPTURE_OOM = (
    SGLANG_TARGET_CAPTURED
    + "[2025-08-08 03:34:57] Capture draft cuda graph begin. This can take up to several minutes. avail "
    "mem=1.70 GB\n" + SGLANG_OOM
)
# The same server up and serving (http_server.py's ready line, a decode batch line) when the OOM comes.
SGLANG_SERVING_OOM = (
    SGLANG_TARGET_CAPTURED + "[2025-08-08 03:35:02] The server is fired up and ready to roll!\n"
    "[2025-08-08 03:41:10] Decode batch. #running-req: 31, #token: 20480, token usage: 0.42, gen throughput "
    "(token/s): 1650.21, #queue-req: 0\n" + SGLANG_OOM
)


def test_sglang_graphs_captured_after_the_targets_place_the_failure_in_capture() -> None:
    assert ranked(SGLANG_DRAFT_CAPTURE_OOM)[0] == "cuda-graph-capture"
    assert ranked(SGLANG_SERVING_OOM)[0] != "cuda-graph-capture"


# text-generation-inference's warm-up (server/text_generation_server/models/flash_causal_lm.py) logs the
# graphs it captures and the OOM it caught while capturing; the router's line as router/src/main.rs prints it.
TGI_CAPTURE_OOM = (
    "2024-05-31T05:54:02.825450Z  INFO text_generation_router: router/src/main.rs:317: Warming up model\n"
    "2024-05-31T05:54:04.410417Z  INFO text_generation_launcher: Cuda Graphs are enabled for sizes "
    "[1, 2, 4, 8, 16, 32]\n"
    "2024-05-31T05:54:05.102311Z ERROR text_generation_launcher: Decode cuda graph warmup failed\n"
    "Traceback (most recent call last):\n"
    '  File "/opt/conda/lib/python3.10/site-packages/text_generation_server/models/flash_causal_lm.py", '
    "line 1003, in warmup\n"
    "    self.cuda_graph_warmup(bs, max_s, max_bt)\n"
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total "
    "capacity of 22.19 GiB of which 36.50 MiB is free.\n"
)
# TGI's warm-up refusing its largest prefill before any graph (its own message: the prefill batch).
TGI_PREFILL_REFUSED = (
    "2024-05-31T05:54:02.825450Z  INFO text_generation_router: router/src/main.rs:317: Warming up model\n"
    'Error: Warmup(Generation("Not enough memory to handle 4096 prefill tokens. You need to decrease '
    '`--max-batch-prefill-tokens`"))\n'
)


def test_tgi_capture_failing_in_its_warm_up_is_graph_capture() -> None:
    assert ranked(TGI_CAPTURE_OOM)[0] == "cuda-graph-capture"
    assert ranked(TGI_PREFILL_REFUSED)[0] != "cuda-graph-capture"


# TensorRT-LLM's PyTorch backend (tensorrt_llm/_torch/pyexecutor/model_engine.py) captures the decode graphs
# after creating the KV cache: "Run generation only CUDA graph warmup for batch size=...".
TRTLLM_CAPTURE_OOM = (
    "[10/02/2025-08:14:51] [TRT-LLM] [I] Run generation only CUDA graph warmup for batch size=128\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.19 GiB of which 1.21 GiB is free.\n"
)
# The running executor failing a step (tensorrt_llm.py's forwardAsync line): serving, not capture.
TRTLLM_STEP_OOM = (
    "[TensorRT-LLM][ERROR] Encountered an error in forwardAsync function: [TensorRT-LLM][ERROR] CUDA "
    "runtime error in cudaMallocAsync(ptr, n, mCudaStream->get()): out of memory\n"
)


def test_tensorrt_llm_graph_warm_up_is_capture() -> None:
    assert ranked(TRTLLM_CAPTURE_OOM)[0] == "cuda-graph-capture"
    assert ranked(TRTLLM_STEP_OOM)[0] != "cuda-graph-capture"


# https://github.com/vllm-project/vllm/issues/11452: V0 logs the end of engine start-up after the graphs;
# an OOM after it is in serving, not in the sampler warm-up that comes before it.
VLLM_STARTED = (
    "INFO 12-24 06:17:49 model_runner.py:1527] Graph capturing finished in 71 secs, took 6.56 GiB\n"
    "INFO 12-24 06:17:49 llm_engine.py:446] init engine (profile, create kv cache, warmup model) took "
    "118.12 seconds\n"
)
VLLM_CAPTURE_OOM = (
    "INFO 12-24 06:16:39 model_runner.py:1417] Capturing cudagraphs for decoding. This may lead to "
    "unexpected consequences if the model is not static.\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
    "23.65 GiB of which 7.06 MiB is free.\n"
)


def test_vllm_engine_started_line_ends_startup() -> None:
    causes = ranked(VLLM_STARTED + VLLM_CAPTURE_OOM.splitlines(keepends=True)[1])
    assert causes[0] != "sampler-or-logits"
    assert "weights-dont-fit" not in causes[:1]
    assert ranked(VLLM_CAPTURE_OOM)[0] == "cuda-graph-capture"


# https://github.com/sgl-project/sglang/issues/8833: a 16-bit copy of gpt-oss-120b (whose original is MXFP4)
# over two 80 GB GPUs.
GPT_OSS_BF16_OOM = (
    "python3 -m sglang.launch_server --model-path lmsys/gpt-oss-120b-bf16 --tp 2 --trust-remote-code "
    "--mem-fraction-static 0.7 --host 0.0.0.0 --port 40000\n\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.98 GiB. GPU 1 has a total capacity of "
    "79.10 GiB of which 92.25 MiB is free. Including non-PyTorch memory, this process has 0 bytes memory in "
    "use. Of the allocated memory 76.93 GiB is allocated by PyTorch, and 46.14 MiB is reserved by PyTorch "
    "but unallocated.\n"
)


def test_a_sixteen_bit_copy_of_a_quantized_model_is_sized_at_sixteen_bits() -> None:
    from oomguard.diagnosis.sizing import model_size

    copy, original = model_size("lmsys/gpt-oss-120b-bf16", {}), model_size("openai/gpt-oss-120b", {})
    assert copy is not None and original is not None
    assert copy.bytes >= 2 * copy.params * 0.99 and copy.bytes > 3 * original.bytes
    assert ranked(GPT_OSS_BF16_OOM)[0] == "weights-dont-fit"
    # The MXFP4 original takes about 30 GiB of each 80 GB GPU: not the weights.
    assert ranked(GPT_OSS_BF16_OOM.replace("lmsys/gpt-oss-120b-bf16", "openai/gpt-oss-120b"))[0] != (
        "weights-dont-fit"
    )


# https://github.com/vllm-project/vllm/issues/49475: graphs already hold 4.27 GiB in private pools, the
# request lacks 21 GiB; freeing every graph would not have made it fit.
POOLS_BELOW_SHORTFALL = (
    "(Worker_TP7_EP7 pid=65033) ERROR 07-31 12:11:49 [multiproc_executor.py:1018] torch.OutOfMemoryError: "
    "CUDA out of memory. Tried to allocate 28.44 GiB. GPU 7 has a total capacity of 178.34 GiB of which 7.38 "
    "GiB is free. Including non-PyTorch memory, this process has 170.94 GiB memory in use. Of the allocated "
    "memory 165.16 GiB is allocated by PyTorch, with 4.27 GiB allocated in private pools (e.g., CUDA "
    "Graphs), and 1.70 GiB is reserved by PyTorch but unallocated.\n"
)


# https://github.com/wtdcode/vllm-backport/issues/94: a serving step's 640 MiB fails with 2.52 GiB (3% of the
# device) in private pools: the graphs vLLM budgeted at startup, not what filled the device.
BUDGETED_GRAPH_POOLS = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 640.00 MiB.\n"
    "GPU 0 has a total capacity of 79.25 GiB of which 287.94 MiB is free.\n"
    "Process ... has 78.86 GiB memory in use. Of the allocated memory 76.14 GiB is\n"
    "allocated by PyTorch, with 2.52 GiB allocated in private pools (e.g., CUDA Graphs),\n"
    "and 1.25 GiB is reserved by PyTorch but unallocated.\n"
)


def test_graph_pools_smaller_than_the_shortfall_are_not_the_cause() -> None:
    assert ranked(POOLS_BELOW_SHORTFALL)[0] != "cuda-graph-capture"
    # Pools far beyond what budgeted graphs take (a fifth of the device), against a request they could have
    # made room for, point at the graphs.
    covered = POOLS_BELOW_SHORTFALL.replace(
        "Tried to allocate 28.44 GiB", "Tried to allocate 8.00 GiB"
    ).replace("with 4.27 GiB allocated in private pools", "with 40.27 GiB allocated in private pools")
    assert "cuda-graph-capture" in ranked(covered)[:2]


def test_graph_pools_of_a_few_percent_are_the_budgeted_graphs() -> None:
    assert ranked(BUDGETED_GRAPH_POOLS)[0] == "activation-peak"
    assert (
        ranked(POOLS_BELOW_SHORTFALL.replace("Tried to allocate 28.44 GiB", "Tried to allocate 8.00 GiB"))[0]
        != "cuda-graph-capture"
    )


# TensorRT-LLM's KV cache manager (cpp/tensorrt_llm/batch_manager/trtGptModelInflightBatching.cpp; a log
# quoted in a public tuning note): the primary pool holds less than one sequence of the engine's max length,
# so the engine shortens it.
TRTLLM_LENGTH_REDUCED = (
    "[TensorRT-LLM][INFO] Memory usage when calculating max tokens in paged kv cache: total: 22.18 GiB, "
    "available: 1.42 GiB\n"
    "[TensorRT-LLM][INFO] Number of blocks in KV cache primary pool: 82\n"
    "[TensorRT-LLM][WARNING] maxAttentionWindow and maxSequenceLen are too large for at least one sequence "
    "to fit in kvCache. they are reduced to 5185\n"
    "[TensorRT-LLM][WARNING] maxInputLen is reduced to 5184\n"
    "[TensorRT-LLM][INFO] Max KV cache pages per sequence: 82\n"
)
# The same pool running dry under traffic (batch_manager/kvCacheManager.cpp): the traffic, not the length.
TRTLLM_POOL_DRY = (
    "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 1.28 GiB for max tokens in paged KV cache (5248).\n"
    "[TensorRT-LLM][ERROR] Assertion failed: Can't allocate new blocks. No free blocks left.\n"
)


def test_tensorrt_llm_shortening_its_max_length_to_the_pool_is_the_context_length() -> None:
    assert ranked(TRTLLM_LENGTH_REDUCED)[0] == "max-model-len-exceeds-kv"
    assert ranked(TRTLLM_POOL_DRY)[0] != "max-model-len-exceeds-kv"


# LMDeploy's PyTorch engine (lmdeploy/pytorch/engine/executor/base.py, update_configs): its recurrent-state
# cache, then its runtime reservation, then the KV blocks from the free memory left.
LMDEPLOY_STATE_CACHE = "AssertionError: No enough gpu memory for state cache. Please reduce max_batch_size.\n"
LMDEPLOY_RUNTIME = "RuntimeError: No enough gpu memory for runtime.\n"
# TurboMind's sequence cache full under load (a running server): not the pool at startup.
TURBOMIND_ENTRIES = "[TM][ERROR] No enough cache entries\n"


def test_lmdeploy_pools_sized_from_nothing_are_the_pool_at_startup() -> None:
    assert ranked(LMDEPLOY_STATE_CACHE)[0] == "kv-cache-insufficient-at-startup"
    assert ranked(LMDEPLOY_RUNTIME)[0] == "kv-cache-insufficient-at-startup"
    assert ranked(TURBOMIND_ENTRIES)[0] != "kv-cache-insufficient-at-startup"


OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.19 GiB of which 1.21 GiB is free.\n"
)
# The frames each engine's startup steps run in (line numbers elided, as pastes often do): TGI's decode-graph
# warm-up (server/text_generation_server/models/flash_causal_lm.py), its sharded weight reads
# (text_generation_server/utils/weights.py), SGLang's KV pool (sglang/srt/model_executor/model_runner.py
# init_memory_pool, sglang/srt/mem_cache/memory_pool.py) and TensorRT-LLM's PyTorch executor creating its KV
# cache manager (tensorrt_llm/_torch/pyexecutor/_util.py).
TGI_GRAPH_FRAMES = (
    "Traceback (most recent call last):\n"
    '  File "/opt/conda/lib/python3.11/site-packages/text_generation_server/models/flash_causal_lm.py", '
    "line ..., in warmup\n"
    "    self.cuda_graph_warmup(bs, max_s, max_bt)\n" + OOM_LINE
)
TGI_WEIGHT_FRAMES = (
    "Traceback (most recent call last):\n"
    '  File "/opt/conda/lib/python3.11/site-packages/text_generation_server/utils/weights.py", line ..., in '
    "get_sharded\n"
    "    return self.get_partial_sharded(tensor_name, dim)\n" + OOM_LINE
)
SGLANG_POOL_FRAMES = (
    "Traceback (most recent call last):\n"
    '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line ..., in '
    "initialize\n"
    "    self.init_memory_pool(\n"
    '  File "/sgl-workspace/sglang/python/sglang/srt/mem_cache/memory_pool.py", line ..., in '
    "_create_buffers\n"
    "    torch.zeros((self.size + self.page_size, self.head_num, self.head_dim), dtype=self.store_dtype)\n"
    + OOM_LINE
)
TRTLLM_KV_FRAMES = (
    "Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.12/dist-packages/tensorrt_llm/_torch/pyexecutor/_util.py", line ..., in '
    "build_managers\n"
    "    kv_cache_manager = self._create_kv_cache_manager(model_engine)\n" + OOM_LINE
)
# SGLang's slot allocator failing under load (sglang/srt/managers/schedule_batch.py): the pool full at
# runtime, not the pool at startup.
SGLANG_SLOTS_FRAMES = (
    "Traceback (most recent call last):\n"
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/schedule_batch.py", line ..., in '
    "prepare_for_extend\n"
    "    out_cache_loc = self.alloc_token_slots(extend_num_tokens)\n" + OOM_LINE
)


def test_other_engines_startup_frames_place_the_step() -> None:
    assert ranked(TGI_GRAPH_FRAMES)[0] == "cuda-graph-capture"
    assert ranked(TGI_WEIGHT_FRAMES)[0] == "weights-dont-fit"
    assert ranked(SGLANG_POOL_FRAMES)[0] == "kv-cache-insufficient-at-startup"
    assert ranked(TRTLLM_KV_FRAMES)[0] == "kv-cache-insufficient-at-startup"
    assert ranked(SGLANG_SLOTS_FRAMES)[0] != "kv-cache-insufficient-at-startup"


# vLLM V0's worker monitor (vllm/executor/multiproc_worker_utils.py) reporting a worker that died while the
# weights loaded: exit code -9 is SIGKILL, the host's OOM killer, not the GPU.
WORKER_SIGKILLED_LOADING = (
    "INFO 03-31 15:44:54 [weight_utils.py:265] Using model weights format ['*.safetensors']\n"
    "Loading safetensors checkpoint shards:  25% Completed | 2/8 [00:00<00:00,  7.24it/s]\n"
    "ERROR 03-31 15:45:40 [multiproc_worker_utils.py:124] Worker VllmWorkerProcess pid 1867860 died, exit "
    "code: -9\n"
)
# The same monitor after a SIGTERM the engine sent its own workers on shutdown
# (https://github.com/vllm-project/vllm/issues/13061): no kill by the host.
WORKER_TERMINATED = (
    "ERROR 02-11 07:40:49 multiproc_worker_utils.py:124] Worker VllmWorkerProcess pid 1786 died, exit code: "
    "-15\n"
)


def test_a_worker_sigkilled_while_loading_is_the_host_not_the_weights() -> None:
    causes = ranked(WORKER_SIGKILLED_LOADING)
    assert causes[0] == "host-ram-oom"
    assert "host-killed" not in signals(WORKER_TERMINATED)


# text-generation-inference's launcher while a shard loads its weights (launcher/src/main.rs), then the
# shard's OOM; the same OOM once the shard is ready and the warm-up (the prefill) runs.
TGI_LOADING_OOM = (
    "2024-01-10T08:12:01.145323Z  INFO text_generation_launcher: Starting shard rank=0\n"
    "2024-01-10T08:12:11.156172Z  INFO shard-manager: text_generation_launcher: Waiting for shard to be "
    "ready... rank=0\n"
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 270.00 MiB. GPU 0 has a total "
    "capacity of 10.75 GiB of which 98.62 MiB is free.\n"
)
TGI_WARMUP_OOM = (
    "2024-01-10T08:12:01.145323Z  INFO text_generation_launcher: Starting shard rank=0\n"
    "2024-01-10T08:12:41.390012Z  INFO shard-manager: text_generation_launcher: Shard ready in 40.2s "
    "rank=0\n"
    "2024-01-10T08:12:42.102311Z  INFO text_generation_router: router/src/main.rs:317: Warming up model\n"
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 270.00 MiB. GPU 0 has a total "
    "capacity of 10.75 GiB of which 98.62 MiB is free.\n"
)
# TensorRT-LLM's runtime reading its engine (runtime/tllmRuntime.cpp), as its FAQ's log shows.
TRTLLM_ENGINE_LOADED = (
    "[TensorRT-LLM][INFO] Loaded engine size: 6695 MiB\n"
    "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 1134.01 MiB for execution context memory.\n"
)


def test_the_weights_step_of_tgi_and_tensorrt_llm_is_read() -> None:
    assert ranked(TGI_LOADING_OOM)[0] == "weights-dont-fit"
    assert ranked(TGI_WARMUP_OOM)[0] != "weights-dont-fit"
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(TRTLLM_ENGINE_LOADED.encode()), evidence)
    numbers = {n.quantity: n.value for n in evidence.of(StartupNumber)}
    assert numbers["weights_bytes"] == 6695 * 2**20
    assert numbers["activation_bytes"] == 1134.01 * 2**20


# vLLM's weight_utils.py as it starts reading the checkpoint (https://github.com/vllm-project/vllm/issues/15800),
# against the same OOM after "Model loading took" (the profile run follows).
VLLM_READING_WEIGHTS_OOM = (
    "INFO 03-31 15:44:54 [weight_utils.py:265] Using model weights format ['*.safetensors']\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 270.00 MiB. GPU 0 has a total capacity "
    "of 23.65 GiB of which 98.62 MiB is free.\n"
)
VLLM_LOADED_OOM = VLLM_READING_WEIGHTS_OOM.replace(
    "[weight_utils.py:265] Using model weights format ['*.safetensors']",
    "[gpu_model_runner.py:1186] Model loading took 14.99 GiB and 4.21 seconds",
)


def test_vllm_reading_its_checkpoint_is_the_weights_step() -> None:
    assert ranked(VLLM_READING_WEIGHTS_OOM)[0] == "weights-dont-fit"
    assert ranked(VLLM_LOADED_OOM)[0] != "weights-dont-fit"


# https://github.com/ollama/ollama/pull/5469: ggml's pinned host buffer for the layers kept on the CPU
# (ggml-cuda.cu ggml_cuda_host_malloc) failing while the model loads: host memory, not the GPU's.
PINNED_HOST_FAILED = (
    "Jul 10 16:29:17 DESKTOP ollama[180]: ggml_cuda_host_malloc: failed to allocate 16607.35 MiB of pinned "
    "memory: out of memory\n"
    "Jul 10 16:29:17 DESKTOP ollama[180]: llm_load_tensors: offloading 11 repeating layers to GPU\n"
    "Jul 10 16:29:17 DESKTOP ollama[180]: llm_load_tensors:        CPU buffer size = 16607.35 MiB\n"
    "Jul 10 16:29:17 DESKTOP ollama[180]: llm_load_tensors:      CUDA0 buffer size =  8608.53 MiB\n"
)
# The device buffer of the same load failing (ggml's CUDA check naming the device allocation).
DEVICE_BUFFER_FAILED = (
    "llm_load_tensors: offloading 33 repeating layers to GPU\n"
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 8608.53 MiB on device 0: cudaMalloc failed: out "
    "of memory\n"
)


def test_a_pinned_host_buffer_failing_is_host_memory() -> None:
    assert ranked(PINNED_HOST_FAILED)[0] == "host-ram-oom"
    assert "host-enomem" not in signals(DEVICE_BUFFER_FAILED)
    assert ranked(DEVICE_BUFFER_FAILED)[0] == "weights-dont-fit"


# vLLM Ascend (vllm_ascend/worker/model_runner_v1.py) capturing its NPU graphs after the KV pool, as a public
# log of it reads; the NPU's allocator message follows.
ASCEND_CAPTURE_OOM = (
    "(EngineCore_DP0 pid=2041805) INFO 10-14 17:17:23 [kv_cache_utils.py:864] GPU KV cache size: 128,000 "
    "tokens\n"
    "(EngineCore_DP0 pid=2041805) INFO 10-14 17:17:23 [model_runner_v1.py:3938] Starting to capture ACL "
    "graphs for cases: [8, 16, 24, 32], mode: FULL, uniform_decode: True\n"
    "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.96 GiB total capacity; 55.91 "
    "GiB already allocated; 55.91 GiB current active; 1.80 GiB free; 58.73 GiB reserved in total by "
    "PyTorch)\n"
)


def test_vllm_ascend_graph_capture_is_the_capture_step() -> None:
    assert ranked(ASCEND_CAPTURE_OOM)[0] == "cuda-graph-capture"


# vLLM's own measurement of the weights it loaded (vllm/v1/worker/gpu_model_runner.py load_model: "Model
# loading took X GiB and Y seconds"), then the profile run's OOM on a 16 GB card: the weights filled it.
WEIGHTS_FILL_THE_CARD = (
    "INFO 03-02 19:49:01 [gpu_model_runner.py:1186] Model loading took 14.99 GiB and 4.21 seconds\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 0 has a total capacity of "
    "15.59 GiB of which 170.44 MiB is free. Including non-PyTorch memory, this process has 15.41 GiB memory "
    "in use.\n"
)
# The same step with weights taking a third of a 24 GB card: the profile run's activations, not the weights.
WEIGHTS_WITH_ROOM = WEIGHTS_FILL_THE_CARD.replace("took 14.99 GiB", "took 7.50 GiB").replace(
    "capacity of 15.59 GiB", "capacity of 23.58 GiB"
)


def test_the_weights_the_engine_measured_against_the_device() -> None:
    assert ranked(WEIGHTS_FILL_THE_CARD)[0] == "weights-dont-fit"
    assert ranked(WEIGHTS_WITH_ROOM)[0] != "weights-dont-fit"


# https://github.com/MiuLab/Taiwan-LLM/issues/24: memory that grows while TGI's shard loads its weights is the
# load itself, not a leak; the same growth words once the server serves still point at a leak.
GROWTH_WHILE_LOADING = (
    "I got just single RTX2080ti(with 11GB ram only) to run the model with text-generation-inference\n"
    "After executing the .sh file, the GPU ram consumption gradually increase. \n"
    'And the message "waiting for shard to be ready ... rank=0" constantly appears.\n'
    'Finally, it ends up with the message "torch.cuda.OutOfMemoryError: CUDA out of memory..."\n'
)


GROWTH_WHILE_SERVING = (
    "2024-05-31T05:54:05.264204Z  INFO text_generation_router: router/src/main.rs:355: Connected\n"
    "After a few hours of requests the GPU ram consumption gradually increase until the server is killed.\n"
    'Finally, it ends up with the message "torch.cuda.OutOfMemoryError: CUDA out of memory..."\n'
)


def test_memory_growing_while_the_weights_load_is_the_load_not_a_leak() -> None:
    assert ranked(GROWTH_WHILE_LOADING)[0] == "weights-dont-fit"
    assert ranked(GROWTH_WHILE_SERVING)[0] == "memory-leak"


# https://github.com/vllm-project/vllm/issues/7256: the offline LLM finished its constructor (the KV pool
# sized, eager: no graphs) and generate() started running the prompts when it failed.
OFFLINE_GENERATING = (
    "INFO 08-07 07:11:28 model_runner.py:736] Loading model weights took 14737.2578 MB\n"
    "INFO 08-07 07:11:31 gpu_executor.py:103] # GPU blocks: 7877, # CPU blocks: 512\n"
    "\n"
    "Processed prompts:   0%|\n"
)


def test_the_offline_progress_bar_is_serving_after_startup() -> None:
    assert "milestone-serving" in signals(OFFLINE_GENERATING)
    # without the bar the last step logged is the KV pool's sizing: still starting up
    assert "milestone-serving" not in signals(OFFLINE_GENERATING.replace("Processed prompts:   0%|\n", ""))
