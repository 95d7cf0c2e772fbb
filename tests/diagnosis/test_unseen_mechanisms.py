"""Mechanisms that decide reports unlike the development set (issue 8): every text that names a failure is
answered, a growth before a host kill is the leak, and the stacks of engines other than vLLM V1 are placed.
Texts are real, pasted as in the cited public threads."""

from __future__ import annotations

import io

from tests.diagnosis.pasted import ranked

from oomguard.diagnosis.diagnosis import diagnose
from oomguard.diagnosis.evidence import Evidence, GpuProcess
from oomguard.diagnosis.read import read_one


def signals(text: str) -> set[str]:
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(text.encode()), evidence)
    return {getattr(f, "name", "") for f in evidence}


# https://github.com/sgl-project/sglang/issues/5372: the first "OOM" of the line is negated, the next are not.
NEGATED_THEN_SAID = (
    "The `--mem-fraction-static` of our online sglang server is 0.95, and it has been running healthily and "
    "stably for a long time. Reducing `--mem-fraction-static` to 0.94 or 0.93 will definitely not cause OOM "
    "and I confirmed this.  But as I mentioned above, with args `--mem-fraction-static=0.95,  "
    "--hicache-ratio=2 ` , OOM occurs before the server is successfully started,  with args "
    "`--mem-fraction-static=0.94,  `--hicache-ratio=2` , sglang server is successfully started but "
    "OOM occurs "
    "while running the benchmark."
)
# https://github.com/vllm-project/vllm/issues/32714: no reader recognises the lines, a memory quantity in use.
SLEEP_RESIDUAL_PROSE = (
    "In v 0.13.0 sleep level 1 with 4x3090 and qwen3 30b model results in 1.14Gb used on each GPU "
    "after sleep "
    "enabled. Sleep is freed 20Gb+\n"
    "In v 0.14 sleep level 1 results in 16Gb used on each GPU after sleep enabled, tested multiple "
    "times, sleep "
    "is freed ~6GB. Reverting to 0.13 fixes problem."
)
# https://github.com/vllm-project/production-stack/issues/687: a pod OOM-killed as its memory ramps up.
ROUTER_RAMPS_UP = (
    "We found an issue during the stability test that router Pod keeps restarting after running for "
    "a certain "
    "amount of time. It seems the router is restarted by k8s because of OOM. We configured the router Pod "
    "limit with 2G memory initially. After raising to 16G, we observed that the memory usage of router is "
    "unbounded and keeps ramping up."
)
# https://github.com/vllm-project/vllm/issues/2669: Ray's memory monitor kills the worker after hours.
RAY_KILL_AFTER_HOURS = (
    "Trying to spin a server with an asyncengine, with 'use_ray' on true. after a few hours, i get the "
    "following error:\n\n"
    "Memory on the node (IP: 169.254.181.2, ID: 708c7baf966d59aa3f08299830c349ca055293ebb1c33d8e72cd3336) "
    "where the task (actor ID: 0dab4ab45f6c947201afac6d01000000, name=RayWorkerVllm.__init__, "
    "pid=308, memory "
    "used=11.15GB) was running was 12.49GB / 13.15GB (0.950003), which exceeds the memory usage threshold of "
    "0.95. Ray killed this worker (ID: 79a553ea91fe46f95e8384ddf8a8f0a01e3418a975ecd0af983c7bb2) because it "
    "was the most recently scheduled task; to see more information about memory usage on this node, use `ray "
    "logs raylet.out -ip 169.254.181.2`."
)
# https://github.com/vllm-project/vllm/issues/9190: "no memory leak from ..." then "leaking memory".
NEGATED_LEAK_THEN_SAID = (
    "[Performance]: phi 3.5 vision model consuming high CPU RAM and the process getting killed\n"
    "Since there is no memory leak from the model forwarding, the source of leaking memory might be various "
    "(`scheduler` or `block_manager` etc)."
)
# https://github.com/defilantech/LLMKube/issues/1724: a container with no limit is "unbounded", not a growth.
NO_LIMIT_IS_NOT_GROWTH = (
    "`InferenceService` sets a memory **request** but never a memory **limit**, so\n"
    "every serving container is unbounded. A model whose resident set exceeds\n"
    "available RAM takes the whole node down instead of being OOM-killed and\n"
    "restarted."
)


# https://github.com/TideDra/lmm-r1/issues/43: vLLM woke up in a colocated RLHF actor.
WAKE_UP_FRAMES = (
    '(ActorModelRayActor pid=348952)   File "/usr/local/lib/python3.10/dist-packages/vllm/devic'
    'e_allocator/cumem.py", line 207, in wake_up\n'
    "(ActorModelRayActor pid=348952)     create_and_map(handle)\n"
    '(ActorModelRayActor pid=348952)   File "/usr/local/lib/python3.10/dist-packages/vllm/devic'
    'e_allocator/cumem.py", line 75, in create_and_map\n'
    "(ActorModelRayActor pid=348952)     python_create_and_map(*allocation_handle)\n"
    "(ActorModelRayActor pid=348952) RuntimeError: CUDA Error: out of memory at /workspace/csrc"
    "/cumem_allocator.cpp:62\n"
    "(LLMRayActor pid=347860) CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:"
    "62 [repeated 3x across cluster]\n"
)
# https://github.com/verl-project/verl/issues/302: the sleep-mode allocator's OOM alone.
SLEEP_ALLOCATOR_LINE = (
    "cuda error: out of memory at /workspace/csrc/cumem_allocator.cpp:62\n"
    "@mfj9999 Followed @wuxibin89 's answer, I lowered gpu_memory_utilization to 0.45 and made "
    "it work.\n"
)
# https://github.com/sgl-project/sglang/issues/14942: the KV slot allocator under EAGLE's verify.
KV_SLOTS_UNDER_EAGLE = (
    '  File "/host_home/common_sync/sglang/python/sglang/srt/managers/scheduler.py", line 2050,'
    " in run_batch\n"
    "    batch_result = self.model_worker.forward_batch_generation(\n"
    "                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/host_home/common_sync/sglang/python/sglang/srt/speculative/eagle_worker.py", line'
    " 300, in forward_batch_generation\n"
    "    self.verify(batch, spec_info)\n"
    '  File "/host_home/common_sync/sglang/python/sglang/srt/speculative/eagle_worker.py", line'
    " 672, in verify\n"
    "    spec_info.prepare_for_verify(batch, self.page_size)\n"
    '  File "/host_home/common_sync/sglang/python/sglang/srt/speculative/eagle_info.py", line 1'
    "11, in prepare_for_verify\n"
    "    batch.out_cache_loc = alloc_token_slots(\n"
)
# https://github.com/sgl-project/sglang/issues/1087: FlashInfer's top-k/top-p sampling.
FLASHINFER_SAMPLING = (
    "Exception in ControllerSingle:\n"
    "Traceback (most recent call last):\n"
    '  File "/opt/tiger/sglang_src/python/sglang/srt/managers/controller_single.py", line 166, '
    "in start_controller_process\n"
    "    controller.loop_for_forward()\n"
    '  File "/opt/tiger/sglang_src/python/sglang/srt/managers/controller_single.py", line 103, '
    "in loop_for_forward\n"
    "    out_pyobjs = self.tp_server.exposed_step(recv_reqs)\n"
    '  File "/opt/tiger/sglang_src/python/sglang/srt/managers/tp_worker.py", line 222, in expos'
    "ed_step\n"
    "    self.forward_step()\n"
    '  File "/opt/tiger/sglang_src/python/sglang/srt/managers/tp_worker.py", line 251, in forwa'
    "rd_step\n"
    "    self.forward_decode_batch(self.running_batch)\n"
    '  File "/opt/tiger/sglang_src/python/sglang/srt/managers/tp_worker.py", line 612, in forwa'
    "rd_decode_batch\n"
    "    next_token_ids = batch.sample(output.next_token_logits)\n"
    '  File "/opt/tiger/sglang_src/python/sglang/srt/managers/schedule_batch.py", line 760, in '
    "sample\n"
    "    batch_next_token_ids, success = top_k_top_p_sampling_from_probs(\n"
    '  File "/home/tiger/.local/lib/python3.9/site-packages/flashinfer/sampling.py", line 483, '
    "in top_k_top_p_sampling_from_probs\n"
)
# https://github.com/sgl-project/sglang/pull/1498: SGLang allocating CUDA-graph state.
SGLANG_GRAPH_STATE = (
    '  File "/opt/tiger/sglang/python/sglang/srt/model_executor/model_runner.py", line 504, in '
    "init_cuda_graphs\n"
    "    self.cuda_graph_runner = CudaGraphRunner(self)\n"
    "                             ^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/opt/tiger/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 143'
    ", in __init__\n"
    "    self.model_runner.attn_backend.init_cuda_graph_state(self.max_num_token)\n"
    '  File "/opt/tiger/sglang/python/sglang/srt/layers/attention/triton_backend.py", line 72, '
    "in init_cuda_graph_state\n"
    "    self.cuda_graph_attn_logits = torch.empty(\n"
    "                                  ^^^^^^^^^^^^\n"
    "torch.O\n"
)
# https://github.com/InternLM/lmdeploy/issues/3646: TurboMind's weights outside PyTorch.
NON_TORCH_ENGINE = (
    "return torch._C._nn.pad(input, pad, mode, value)\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 112.00 MiB. GPU 0 has a tota"
    "l capacity of 14.90 GiB of which 35.31 MiB is free. Including non-PyTorch memory, this pro"
    "cess has 14.86 GiB memory in use. Of the allocated memory 336.00 MiB is allocated by PyTor"
    "ch, and 0 bytes is reserved by PyTorch but unallocated. If reserved but unallocated memory"
    " is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:\n"
)


# https://github.com/vllm-project/vllm/issues/8903: a vision model failing in its profile run.
VISION_MODEL_PROFILE = (
    "docker run  --gpus all \\\n"
    "    -v /data/hf_cache/ \\\n"
    '    --env "HUGGING_FACE_HUB_TOKEN=<token>" \\\n'
    "    -p 8000:8000 \\\n"
    "    --ipc=host \\\n"
    "    vllm/vllm-openai:latest \\\n"
    "    --model meta-llama/Llama-3.2-11B-Vision-Instruct \\\n"
    "    --tensor-parallel-size 4 \\\n"
    "    --max-model-len 4096 \\\n"
    "    --download_dir /data/vllm_cache \\\n"
    "    --enforce-eager\n"
    "VllmWorkerProcess pid=214) ERROR 09-27 05:20:38 multiproc_worker_utils.py:233] Exception"
    " in worker VllmWorkerProcess while processing method determine_num_available_blocks: CUD"
    "A out of memory. Tried to allocate 19.63 GiB. GPU 3 has a total capacity of 79.15 GiB of"
    " which 17.73 GiB is free. Process 78729 has 61.41 GiB memory in use. Of the allocated me"
    "mory 56.64 GiB is allocated by PyTorch, and 4.07 GiB is reserved by PyTorch but unalloca"
    "ted. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=exp"
    "andable_segments:True to avoid fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables), Tra\n"
)
# https://github.com/vllm-project/vllm/issues/18550: a sentence quoting a setting.
SENTENCE_QUOTING_CODE = (
    'I need 12 images in my prompt, but if I set limit_mm_per_prompt={"image": 12, "video": 0'
    "}, vLLM will reserve 16384 * 12 tokens for multi-modal embeddings during the profiling s"
    "tage, which causes an OOM error. However, I set max_pixels to 768 × 28 × 28 when loading"
    " the Qwen2_5_VLProcessor, so each image would consume at most 768 tokens.\n"
)


# https://github.com/vllm-project/vllm/issues/8073: the setup in a Python LLM(...) call.
LLM_CALL_WITH_DRAFT = (
    'llm = LLM("nvidia/Llama-3.1-Minitron-4B-Width-Base", enable_prefix_caching=True, block_s'
    "ize=3, gpu_memory_utilization=0.8, max_num_batched_tokens=11000,  max_model_len=11000, s"
    'peculative_model="ibm-fms/llama3-8b-accelerator", num_speculative_tokens=1, use_v2_block'
    "_manager=True)\n"
    "In contrast, when SD is disabled, runs always complete even at high max_model_len`, `max"
    "_num_batched_tokens` and `gpu_memory_utilization`.\n"
    "OutOfMemoryError: CUDA out of memory. Tried to allocate 1.86 GiB. GPU 0 has a total capa"
    "city of 21.99 GiB of which 337.38 MiB is free. Process 30125 has 21.64 GiB memory in use"
    ". Of the allocated memory 18.20 GiB is allocated by PyTorch, with 27.10 MiB allocated in"
    " private pools (e.g., CUDA Grap\n"
)


# https://github.com/vllm-project/vllm/issues/2248: two servers share a GPU at 0.4 each.
TWO_SERVERS_AT_04 = (
    "Since vLLM 0.2.5, we can't even run llama-2 70B 4bit AWQ on 4*A10G anymore, have to use "
    "old vLLM.  Similar problems even trying to be two 7b models on 80B A100.\n"
    "\n"
    'For small models, like 7b with 4k tokens, vLLM fails for "cache blocks" even though alot'
    " more memory is left.\n"
    "    --gpus '\"device=1\"' \\\n"
    "\t--max-num-batched-tokens $tokens \\\n"
    "\t--max-model-len=$tokens \\\n"
    "\t--gpu-memory-utilization 0.4 \\\n"
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utiliza"
    "tion` when initializing the engine.\n"
)
# https://github.com/vllm-project/vllm/pull/5714: a 70B model on one GPU (cut before the OOM).
SEVENTY_B_ON_ONE_GPU = (
    "python -c 'from vllm import LLM;LLM(\"meta-llama/Meta-Llama-3-70B-Instruct\")'\n"
    "INFO 06-20 16:09:23 llm_engine.py:164] Initializing an LLM engine (v0.5.0.post1) with co"
    "nfig: model='meta-llama/Meta-Llama-3-70B-Instruct', speculative_config=None, tokenizer='"
    "meta-llama/Meta-Llama-3-70B-Instruct', skip_tokenizer_init=False, tokenizer_mode=auto, r"
    "evision=None, rope_scaling=None, rope_theta=None, tokenizer_revision=None, trust_remote_"
    "code=False, dtype=torch.bfloat16, max_seq_len=8192, download_dir=None, load_format=LoadF"
    "ormat.AUTO, t\n"
)
# https://github.com/huggingface/trl/issues/2688: vLLM inside a trainer.
PROFILE_SAW_NO_WEIGHTS = (
    "INFO 01-30 05:50:12 model_runner.py:1115] Loading model weights took 0.0000 GB\n"
    "INFO 01-30 05:50:16 worker.py:266] Memory profiling takes 3.26 seconds\n"
    "INFO 01-30 05:50:16 worker.py:266] the current vLLM instance can use total_gpu_memory (7"
    "9.10GiB) x gpu_memory_utilization (0.90) = 71.19GiB\n"
    "INFO 01-30 05:50:16 worker.py:266] model weights take 0.00GiB; non_torch_memory takes 0."
    "00GiB; PyTorch activation peak memory takes 0.00GiB; the rest of the memory reserved for"
    " KV Cache is 71.19GiB.\n"
    "INFO 01-30 05:50:16 executor_base.py:108] # CUDA blocks: 39874, # CPU blocks: 2240\n"
    "INFO 01-30 05:50:16 executor_base.py:113] Maximum concurrency for 131072 tokens per requ"
    "est: 4.87x\n"
    "[rank0]: Traceback (most recent call last):\n"
    '[rank0]:   File "/home/ab/grpo/train.py", line 173, in <module>\n'
    "[rank0]:     trainer = GRPOTrainer(\n"
    '[rank0]:   File "/home/ab/grpo/env/lib/python3.10/site-packages/trl/trainer/grpo_trainer'
    '.py", line 314, in __init__\n'
    "[rank0]:     self.llm = LLM(\n"
)


# https://github.com/ollama/ollama/issues/9322: systemd on a unit the OOM killer hit.
SYSTEMD_OOM_KILL = (
    "Feb 24 15:36:32 adl ollama[2521]: time=2025-02-24T15:36:32.318-08:00 level=INFO source=m"
    'emory.go:356 msg="offload to cuda" layers.requested=-1 layers.model=81 layers.offload=14'
    ' layers.split=7,7 memory.available="[14.5 GiB 15.2 GiB]" memory.gpu_overhead="0 B" memor'
    'y.required.full="136.3 GiB" memory.required.partial="28.7 GiB" memory.required.kv="640.0'
    ' MiB" memory.required.allocations="[14.3 GiB 14.3 GiB]" memory.weights.total="128.1 GiB"'
    ' memory.weights.repeating="126.2 GiB" memory.weights.nonrepeating="2.0 GiB" memory.graph'
    '.full="1.1 GiB" memory.graph.partial="1.1 GiB"\n'
    "Feb 24 11:16:31 adl systemd[1]: ollama.service: A process of this unit has been killed b"
    "y the OOM killer.\n"
    "Feb 24 11:16:32 adl systemd[1]: ollama.service: Failed with result 'oom-kill'.\n"
    "Feb 24 11:16:32 adl systemd[1]: ollama.service: Consumed 32.964s CPU time, 123.9G memory"
    " peak.\n"
)
# https://github.com/triton-inference-server/server/issues/4154: the memory cgroup lines of a kill.
MEMCG_AT_LIMIT = (
    "[44517.301476] memory: usage 131072kB, limit 131072kB, failcnt 15691\n"
    "[44517.301477] memory+swap: usage 0kB, limit 9007199254740988kB, failcnt 0\n"
    "[44517.301477] kmem: usage 19932kB, limit 9007199254740988kB, failcnt 0\n"
    "[44517.301478] Memory cgroup stats for /kubepods/burstable/pod45dbec92-0481-4b70-b999-15"
    "8b7cf2f909:\n"
    "[44517.301490] anon 110723072\n"
    "[44517.301490] file 4108288\n"
    "[44517.301490] shmem 4190208\n"
)
# https://github.com/ggml-org/llama.cpp/issues/8101: llama.cpp: KV for a 1M context.
LLAMACPP_KV_INIT = (
    "llama_new_context_with_model: n_ctx      = 1048576\n"
    "llama_new_context_with_model: n_batch    = 2048\n"
    "llama_new_context_with_model: n_ubatch   = 512\n"
    "llama_new_context_with_model: flash_attn = 0\n"
    "llama_new_context_with_model: freq_base  = 2804339712.0\n"
    "llama_new_context_with_model: freq_scale = 1\n"
    "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 13743895350"
    "4\n"
    "llama_kv_cache_init: failed to allocate buffer for kv cache\n"
    "llama_new_context_with_model: llama_kv_cache_init() failed for self-attention cache\n"
)
# https://github.com/ollama/ollama/issues/10735: Ollama: an allocation right after the KV sizing.
OLLAMA_KV_BUFFER = (
    "May 16 15:11:15 myH100VM ollama[1405]: llama_context: n_ctx_per_seq (32768) < n_ctx_trai"
    "n (131072) -- the full capacity of the model will not be utilized\n"
    "May 16 15:11:15 myH100VM ollama[1405]: llama_kv_cache_unified: kv_size = 655360, type_k "
    "= 'f16', type_v = 'f16', n_layer = 40, can_shift = 1, padding = 32\n"
    "May 16 15:11:15 myH100VM ollama[1405]: llama_kv_cache_unified:      CUDA0 KV buffer size"
    " = 51200.00 MiB\n"
    "May 16 15:11:15 myH100VM ollama[1405]: llama_kv_cache_unified: KV self size  = 51200.00 "
    "MiB, K (f16): 25600.00 MiB, V (f16): 25600.00 MiB\n"
    "May 16 15:11:15 myH100VM ollama[1405]: ggml_backend_cuda_buffer_type_alloc_buffer: alloc"
    "ating 42256.00 MiB on device 0: cudaMalloc failed: out of memory\n"
)
# https://github.com/NVIDIA/TensorRT-LLM/issues/494: TensorRT-LLM: a pool below one sequence.
TRT_ONE_SEQUENCE = (
    "[TensorRT-LLM][INFO] Using 693 tokens in paged KV cache.\n"
    "E1128 16:31:49.479096 227 backend_model.cc:634] ERROR: Failed to create instance: unexpe"
    "cted error when creating modelInstanceState: maxTokensInPagedKvCache must be large enoug"
    "h to process at least 1 sequence to completion (i.e. must be larger than beam_width * to"
    "kensPerBlock * maxBlocksPerSeq)\n"
)


# https://github.com/vllm-project/vllm/issues/2624: vLLM 0.2.7 capturing graphs in warm_up_model.
V0_WARM_UP_MODEL = (
    "Traceback (most recent call last):\n"
    '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
    '  File "<frozen runpy>", line 88, in _run_code\n'
    '  File "/home/user/projects/repos/vllm/vllm/entrypoints/openai/api_server.py", line 217,'
    " in <module>\n"
    "    engine = AsyncLLMEngine.from_engine_args(engine_args)\n"
    "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/home/user/projects/repos/vllm/vllm/engine/async_llm_engine.py", line 617, in fr'
    "om_engine_args\n"
    "    engine = cls(parallel_config.worker_use_ray,\n"
    "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/home/user/projects/repos/vllm/vllm/engine/async_llm_engine.py", line 321, in __'
    "init__\n"
    "    self.engine = self._init_engine(*args, **kwargs)\n"
    "                  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/home/user/projects/repos/vllm/vllm/engine/async_llm_engine.py", line 366, in _i'
    "nit_engine\n"
    "    return engine_class(*args, **kwargs)\n"
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/home/user/projects/repos/vllm/vllm/engine/llm_engine.py", line 112, in __init__'
    "\n"
    "    self._init_cache()\n"
    '  File "/home/user/projects/repos/vllm/vllm/engine/llm_engine.py", line 339, in _init_ca'
    "che\n"
    '    self._run_workers("warm_up_model")\n'
)
# https://github.com/vllm-project/vllm/issues/2856: the same under DJL Serving's prefix.
DJL_WRAPPED_CAPTURE = (
    "WARN  PyProcess W-252-model-stderr: 2024-02-13 20:43:43,457     ERROR worker.py:405 -- U"
    "nhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): ray::RayWorkerVllm.execu"
    "te_method() (pid=10548, ip=172.17.0.2, actor_id=52763143f84a75fbe7e8dca001000000, repr=<"
    "vllm.engine.ray_utils.RayWorkerVllm object at 0x7fdc6d0e6d10>)\n"
    'WARN  PyProcess W-252-model-stderr:   File "/usr/local/lib/python3.10/dist-packages/vllm'
    '/engine/ray_utils.py", line 30, in execute_method\n'
    "WARN  PyProcess W-252-model-stderr:     return executor(*args, **kwargs)\n"
    'WARN  PyProcess W-252-model-stderr:   File "/usr/local/lib/python3.10/dist-packages/vllm'
    '/worker/worker.py", line 125, in warm_up_model\n'
    "WARN  PyProcess W-252-model-stderr:     self.model_runner.capture_model(self.gpu_cache)\n"
    'WARN  PyProcess W-252-model-stderr:   File "/usr/local/lib/python3.10/dist-packages/torc'
    'h/utils/_contextlib.py", line 115, in decorate_context\n'
)
# https://github.com/NVIDIA/TensorRT-LLM/issues/2335: TensorRT-LLM's runtime buffers.
TRT_RUNTIME_BUFFERS = (
    "[TensorRT-LLM][ERROR] Encountered an error in forwardAsync function: [TensorRT-LLM][ERRO"
    "R] CUDA runtime error in ::cudaMallocAsync(ptr, n, mMemPool->getPool(), mCudaStream->get"
    "()): out of memory (/home/work/xingwuFileSystem/24.10.15/TensorRT-LLM/cpp/tensorrt_llm/r"
    "untime/tllmBuffers.h:125)\n"
    "1       0x7f1ddb698e13 void tensorrt_llm::common::check<cudaError>(cudaError, char const"
    "*, char const*, int) + 147\n"
    "2       0x7f1ddd3d9e43 tensorrt_llm::runtime::BufferManager::gpu(nvinfer1::Dims64, nvinf"
    "er1::DataType) const + 515\n"
    "3       0x7f1ddd8bcab3 tensorrt_llm::batch_manager::RuntimeBuffers::reshape(tensorrt_llm"
    "::runtime::TllmRuntime const&, tensorrt_llm::runtime::ModelConfig const&, tensorrt_llm::"
    "runtime::WorldConfig const&) + 1923\n"
)
# https://github.com/local-inference-lab/vllm/pull/258: a fragment with the line number elided.
ELIDED_FRAME = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...\n"
    '  File ".../vllm/v1/sample/sampler.py", line ...\n'
    "    return logits.log_softmax(dim=-1, dtype=torch.float32)\n"
)


# https://github.com/triton-inference-server/server/issues/7562: nvtop rows of two vLLM servers on one T4.
NVTOP_TWO_SERVERS = (
    "PID USER DEV     TYPE  GPU        GPU MEM    CPU  HOST MEM Command\n"
    "1880122 root   0  Compute   0%   5102MiB  33%     1%   5959MiB /opt/tritonserver/backend"
    "s/python/triton_python_backend_stub /models_vllm_gemma2B/gemma_2B_1/1/model.py t\n"
    "1894187 root   0  Compute   0%   5102MiB  33%     1%   5950MiB /opt/tritonserver/backend"
    "s/python/triton_python_backend_stub /models_vllm_gemma2B_2/gemma_2B_1/1/model.py\n"
    "1879648 root   0  Compute   0%    164MiB   1%     1%    420MiB tritonserver --model-repo"
    "sitory=/models_vllm_gemma2B --http-port 12000 --grpc-port 12001 --metrics-port 1\n"
    "1893772 root   0  Compute   0%    164MiB   1%     1%    412MiB tritonserver --model-repo"
    "sitory=/models_vllm_gemma2B_2 --http-port 11000 --grpc-port 11001 --metrics-port\n"
    "INFO 08-22 15:08:23 model_runner.py:732] Loading model weights took 4.7384 GB\n"
    "[ERROR] No available memory for the cache blocks.\n"
)
# https://github.com/wtdcode/vllm-backport/issues/94: the allocator message wrapped over lines.
WRAPPED_ALLOCATOR_TEXT = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 640.00 MiB.\n"
    "GPU 0 has a total capacity of 79.25 GiB of which 287.94 MiB is free.\n"
    "Process ... has 78.86 GiB memory in use. Of the allocated memory 76.14 GiB is\n"
    "allocated by PyTorch, with 2.52 GiB allocated in private pools (e.g., CUDA Graphs),\n"
    "and 1.25 GiB is reserved by PyTorch but unallocated.\n"
)


# https://github.com/intel/llm-scaler/issues/590: a table of host memory growth per config.
RSS_TABLE = (
    "| config on b2 | RSS delta after 40 requests | per request | throughput @16 streams |\n"
    "|---|---|---|---|\n"
    "| **TP=2 + thresholds** | **+0 MB** | 0 | 212 tok/s |\n"
    "| PP=2, no thresholds | +168 MB | ~4 MB | 267 tok/s |\n"
    "| **PP=2 + thresholds** | **+4079 MB** | ~102 MB | 278 tok/s |\n"
)


def test_a_negated_mention_does_not_hide_a_later_plain_one():
    assert "prose-oom" in signals(NEGATED_THEN_SAID)
    assert "prose-leak" in signals(NEGATED_LEAK_THEN_SAID)


def test_text_naming_a_failure_no_reader_knows_is_answered():
    assert ranked(NEGATED_THEN_SAID)  # no refusal
    causes = ranked(SLEEP_RESIDUAL_PROSE)
    assert causes and "failure-words" in signals(SLEEP_RESIDUAL_PROSE)


def test_growth_before_a_host_kill_is_the_leak():
    assert ranked(ROUTER_RAMPS_UP)[0] == "memory-leak"
    assert ranked(RAY_KILL_AFTER_HOURS)[:2] == ["memory-leak", "host-ram-oom"]
    assert ranked(NEGATED_LEAK_THEN_SAID)[0] == "memory-leak"


def test_a_container_without_a_limit_is_not_a_growth():
    assert "prose-growth" not in signals(NO_LIMIT_IS_NOT_GROWTH)
    assert ranked(NO_LIMIT_IS_NOT_GROWTH)[0] == "host-ram-oom"


def test_a_setting_or_a_tool_name_is_no_failure_word():
    for text in (
        "model: Qwen/Qwen3-0.6B\ngpu-memory-utilization: 7\n",
        "see oomguard --help for the options\n",
    ):
        assert "failure-words" not in signals(text)


def test_waking_up_into_memory_someone_else_took_is_another_process():
    assert ranked(WAKE_UP_FRAMES)[0] == "other-process-or-shared-gpu"
    assert ranked(SLEEP_ALLOCATOR_LINE)[0] == "other-process-or-shared-gpu"


def test_the_kv_slot_allocator_failing_is_the_pool_not_its_caller():
    assert ranked(KV_SLOTS_UNDER_EAGLE)[:2] == ["kv-exhaustion-at-runtime", "spec-decode-or-lora-extra"]


def test_sglang_frames_are_placed():
    assert ranked(FLASHINFER_SAMPLING)[0] == "sampler-or-logits"
    assert ranked(SGLANG_GRAPH_STATE)[0] == "cuda-graph-capture"


def test_a_process_full_of_memory_pytorch_did_not_allocate_is_an_engines_weights():
    assert ranked(NON_TORCH_ENGINE)[0] == "weights-dont-fit"


# https://github.com/vllm-project/vllm/issues/15617: the sampler warm-up failing on 03-27.
SAMPLER_WARMUP = (
    "ERROR 03-27 17:34:18 [core.py:343] RuntimeError: CUDA out of memory occurred when warming up sampler "
    "with 1024 dummy requests. Please try lowering max_num_seqs or gpu_memory_ut\n"
)
# https://github.com/vllm-project/vllm/issues/10439: no room for KV blocks on 11-18 (docker compose prefix).
NO_CACHE_BLOCKS = (
    'vllm-1  | ERROR 11-18 18:07:28 engine.py:366]   File "/usr/local/lib/python3.12/dist-packages/vllm/'
    'worker/worker.py", line 493, in raise_if_cache_size_invalid\n'
    'vllm-1  | ERROR 11-18 18:07:28 engine.py:366]     raise ValueError("No available memory for the cache '
    'blocks. "\n'
    "vllm-1  | ERROR 11-18 18:07:28 engine.py:366] ValueError: No available memory for the cache blocks. Try "
    "increasing `gpu_memory_utilization` when initializing the engine.\n"
)


def test_a_directory_of_two_incidents_is_diagnosed_per_incident(run_diagnose):
    code, result, _ = run_diagnose(SAMPLER_WARMUP, NO_CACHE_BLOCKS, names=("a/vllm.log", "b/vllm.log"))
    assert code == 0
    found = [(i["cause"], i["sources"][0].rsplit("/", 2)[-2]) for i in result["incidents"]]
    assert found == [("sampler-or-logits", "a"), ("kv-cache-insufficient-at-startup", "b")]
    assert "2 incidents" in result["skipped"][0]
    code, text, _ = run_diagnose(SAMPLER_WARMUP, NO_CACHE_BLOCKS, args=())
    assert code == 0 and text.startswith("2 incidents in the inputs")


def test_ranks_failing_together_are_one_incident(run_diagnose):
    code, result, _ = run_diagnose(
        NO_CACHE_BLOCKS, NO_CACHE_BLOCKS.replace("18:07:28", "18:07:31"), names=("rank0.log", "rank1.log")
    )
    assert code == 0 and result["incidents"] == []


def test_a_multimodal_models_profile_run_is_its_encoder():
    assert ranked(VISION_MODEL_PROFILE)[:2] == ["multimodal-encoder", "activation-peak"]


def test_a_sentence_quoting_code_is_still_a_sentence():
    assert {"prose-multimodal", "prose-oom"} <= signals(SENTENCE_QUOTING_CODE)
    assert ranked(SENTENCE_QUOTING_CODE)[0] == "multimodal-encoder"
    # A log line's bracketed fields are no quoted code: it stays machine text.
    nccl = (
        "2025-09-24T03:57:03.905654827Z [2025-09-23 23:57:03] vllm-deepseek-ep-decode-0:1673:9080 [0] "
        "include/alloc.h:228 NCCL WARN Cuda failure 2 'out of memory'\n"
    )  # https://github.com/vllm-project/vllm/issues/25597
    assert "prose-library-regression" not in signals(nccl)


def test_the_setup_is_read_from_a_python_llm_call():
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(LLM_CALL_WITH_DRAFT.encode()), evidence)
    setup = diagnose(evidence).setup
    assert setup.model == "nvidia/Llama-3.1-Minitron-4B-Width-Base"
    assert setup.flags["speculative_model"] == "ibm-fms/llama3-8b-accelerator"
    assert setup.flags["gpu_memory_utilization"] == "0.8"
    assert ranked(LLM_CALL_WITH_DRAFT)[0] == "spec-decode-or-lora-extra"


def test_a_utilization_that_shares_the_gpu_ranks_the_tenant_above_the_empty_pool():
    assert ranked(TWO_SERVERS_AT_04)[:2] == [
        "other-process-or-shared-gpu",
        "kv-cache-insufficient-at-startup",
    ]


def test_weights_larger_than_any_common_device_need_no_oom_line():
    assert ranked(SEVENTY_B_ON_ONE_GPU)[0] == "weights-dont-fit"


def test_a_profile_that_measured_no_weights_points_at_the_other_tenant():
    assert ranked(PROFILE_SAW_NO_WEIGHTS)[0] == "other-process-or-shared-gpu"


def test_host_kills_in_systemd_and_memory_cgroup_words():
    assert "kernel-oom-kill" in signals(SYSTEMD_OOM_KILL)
    assert ranked(SYSTEMD_OOM_KILL)[0] == "host-ram-oom"
    assert ranked(MEMCG_AT_LIMIT)[0] == "host-ram-oom"


def test_llama_cpp_kv_for_the_context_failing_is_the_context_length():
    for text in (LLAMACPP_KV_INIT, OLLAMA_KV_BUFFER):
        assert ranked(text)[0] == "max-model-len-exceeds-kv"
    assert ranked(TRT_ONE_SEQUENCE)[0] == "max-model-len-exceeds-kv"


def test_vllm_0_2_warm_up_model_is_graph_capture_whatever_the_wrapper():
    assert ranked(V0_WARM_UP_MODEL)[0] == "cuda-graph-capture"
    assert ranked(DJL_WRAPPED_CAPTURE)[0] == "cuda-graph-capture"


def test_tensorrt_llm_runtime_buffers_are_the_logits():
    assert ranked(TRT_RUNTIME_BUFFERS)[0] == "sampler-or-logits"


def test_a_frame_with_its_line_number_elided_is_still_a_frame():
    assert ranked(ELIDED_FRAME)[0] == "sampler-or-logits"


def test_nvtop_rows_are_processes_and_the_tenant_ranks_above_the_empty_pool():
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(NVTOP_TWO_SERVERS.encode()), evidence)
    procs = evidence.of(GpuProcess)
    assert [(p.pid, p.gpu, p.used >> 20) for p in procs[:2]] == [(1880122, 0, 5102), (1894187, 0, 5102)]
    assert ranked(NVTOP_TWO_SERVERS)[:2] == [
        "other-process-or-shared-gpu",
        "kv-cache-insufficient-at-startup",
    ]


def test_the_allocator_message_wrapped_over_lines_is_no_prose():
    assert "prose-cudagraph" not in signals(WRAPPED_ALLOCATOR_TEXT)


def test_a_table_of_memory_quantities_is_answered():
    assert "failure-words" in signals(RSS_TABLE) and ranked(RSS_TABLE)
