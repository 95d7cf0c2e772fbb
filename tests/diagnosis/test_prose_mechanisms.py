"""What a reporter's sentences say about the mechanism (its trend, who holds the memory, which tensor is
large), read on prose lines only. Each reading has its real text (thread cited) and a near-miss that must not
fire: the same words in a log line, a table, or a sentence about another mechanism."""

from __future__ import annotations

from tests.diagnosis.pasted import ranked, read

from oomguard.diagnosis.evidence import Signal

# A log line's level and source tag: the same sentence behind it is an engine's, not the reporter's.
LOG_PREFIX = "INFO 05-01 10:00:00 [core.py:12] "


def prose(text: str) -> set[str]:
    return {s.name for s in read(text).of(Signal) if s.name.startswith("prose-")}


# --- a trend: the memory grows over time -------------------------------------------------------------------

# https://github.com/waybarrios/vllm-mlx/issues/442
GROWS_OVER_TIME = (
    "vllm-mlx / MLX backend grows wired/Metal memory over time and eventually aborts with "
    "`kIOGPUCommandBufferCallbackErrorOutOfMemory`"
)
# https://github.com/LMCache/LMCache/issues/3767
GROWS_MONOTONICALLY = """\
When replaying a long timed trace (Mooncake `toolagent_trace.jsonl`, ~23K
  requests) against vLLM + LMCache v1 in embedded mode (LMCacheConnectorV1,
  `kv_role: kv_both`), the vLLM EngineCore process's `RssAnon`
  (anonymous-page RSS) grows monotonically. The host eventually OOM-kills
  EngineCore.
"""
# https://github.com/hiyouga/EasyR1/issues/159 ("during training the RAM keeps increasing, OOM happens")
GROWS_CHINESE = (
    "训练的时候内存会不断的增加，会出现OOM的情况，"
    "即使关掉了val的部分，还是很容易会OOM，更新了vllm版本后依然没有解决"
)
# https://github.com/ggml-org/llama.cpp/issues/23446: it grows with the context, which is the context's size.
GROWS_WITH_CONTEXT = (
    "VRAM grows monotonically by Δ_context × n_kv_heads × head_dim × sizeof(half) × 2 (K+V) per turn."
)


def test_a_memory_growing_over_time_is_read_however_it_is_said():
    for text in (GROWS_OVER_TIME, GROWS_MONOTONICALLY, GROWS_CHINESE):
        assert "prose-growth" in prose(text), text
        assert ranked(text)[0] == "memory-leak", text


def test_a_growth_with_the_context_is_no_trend():
    assert "prose-growth" not in prose(GROWS_WITH_CONTEXT)


def test_a_growth_in_a_log_line_is_no_sentence():
    # (the sentence as an engine would log it: a level and a source tag)
    assert "prose-growth" not in prose(LOG_PREFIX + GROWS_OVER_TIME)


# --- who holds the memory: another instance, or a previous run's processes still alive ---------------------

# https://github.com/vllm-project/vllm-omni/issues/2317
ORPHANED_WORKERS = """\
Expected: All GPU memory released after container removal
Actual: 2 orphaned VLLM::Worker processes (one per stage) remain alive,
holding ~22GB VRAM. They are invisible to docker ps but visible in nvidia-smi.
"""
# https://github.com/xorbitsai/inference/issues/1212 ("I killed every process, then found the GPU still
# occupied")
STILL_OCCUPIED = (
    "我启动报错了之后我先去查看是否启动了，接着查看日志发现oom了，我以为没啥问题了，就想着启动别打模型吧，"
    "结果提示我已经满了，我就去kill所有进程，接着查看我的gpu发现还在被占用"
)
# https://github.com/vllm-project/vllm/pull/18974
TWO_INSTANCES = (
    "This fixes a bug in memory profiling where we conservatively assume all GPU memory usage is due to "
    "non-torch forward pass allocation. If 2 LLM instances are allocated in the same test case, the second "
    "one will likely think it ran out of memory."
)
# https://github.com/vllm-project/vllm/issues/29481 ("I plan to deploy two qwen3-0.6b models on one 4090")
TWO_ON_ONE_CARD = (
    "打算在一张4090上部署两个qwen3-0.6b的模型接口，按道理来说这么小的模型加上0.25的gpu-memory-utilization，"
    "每个接口应该只占6g显存，一张4090足够了，但是目前只能部起来一个，另一个报错了"
)
# https://github.com/OpenBMB/MiniCPM-V/issues/392: one model on one card ("我在一张A100-80G显卡上面做了测试").
ONE_ON_ONE_CARD = "我在一张A100-80G显卡上面做了测试，发现使用vllm加载时，内存会先到16GB（读取模型）"


def test_another_instance_or_a_previous_runs_processes_hold_the_device():
    for text in (ORPHANED_WORKERS, STILL_OCCUPIED, TWO_INSTANCES, TWO_ON_ONE_CARD):
        assert "prose-other-process" in prose(text), text
        assert ranked(text)[0] == "other-process-or-shared-gpu", text


def test_one_model_on_one_card_is_no_other_tenant():
    assert "prose-other-process" not in prose(ONE_ON_ONE_CARD)


def test_orphaned_workers_in_a_process_table_are_no_sentence():
    table = "|    0   N/A  N/A   4242   C   VLLM::Worker (orphaned process)            21950MiB |"
    assert "prose-other-process" not in prose(table)


# --- which tensor is large: the vocabulary-wide logits ------------------------------------------------------

# https://github.com/ROCm/ATOM/pull/1451
LARGE_LOGITS = """\
This PR fixes the OOM error of running deepseek v4 with high concurrency.

Root cause: Previously atom-vllm routes mixed batch (prefill + decode) to prefill path, witch will create \
very large intermediate tensor `logits` witch is related with batch size.
"""
# https://github.com/huggingface/transformers/pull/31292
LARGE_VOCABULARY = """\
Basically we get:
Llama3 8B -> MIND-BLOWING 3.62 memory usage reduction factor (due to large vocabulary)
"""
# https://github.com/exo-explore/exo/issues/1048: a large tensor, the attention's, not the vocabulary's.
LARGE_ATTENTION = (
    "In generate.py, prefill_step_size is currently set to 65536, which causes MLX to attempt allocating a "
    "very large attention matrix (~37 GB) as a single Metal buffer during prefill."
)


def test_the_logits_or_the_vocabulary_called_large_are_the_logits_peak():
    for text in (LARGE_LOGITS, LARGE_VOCABULARY):
        assert "prose-logprobs" in prose(text), text
        assert ranked(text)[0] == "sampler-or-logits", text


def test_a_large_attention_tensor_is_not_the_logits():
    assert "prose-logprobs" not in prose(LARGE_ATTENTION)


def test_large_logits_in_a_log_line_are_no_sentence():
    assert "prose-logprobs" not in prose(LOG_PREFIX + LARGE_LOGITS.splitlines()[-1])


# --- a step's shape: the prompt prefilled whole, unchunked ------------------------------------------------

# https://github.com/TheTom/vllm-swift/issues/18
CHUNKING_FORCED_OFF = (
    "The root cause is that vllm-swift force-disables chunked prefill, so the entire prompt is sent to the "
    "Swift engine in a single `prefill_req` call."
)
# https://github.com/FlashML-org/FreeToken/issues/87: the unchunked run crashes, the chunked one passes.
UNCHUNKED_CRASH = "**A) Chunked prefill DISABLED (262144 = no chunking) → CRASH**"
CHUNKED_PASSES = "**B) Chunked prefill ENABLED (16384) → ALL TESTS PASS**"
# https://github.com/vllm-project/vllm/issues/26863: the flag on a command line is configuration.
NO_CHUNKING_FLAG = (
    "vllm serve Qwen/Qwen3-VL-4B-Instruct --max-model-len 32768 --tensor-parallel-size 1 "
    "--gpu-memory-utilization 0.95 --dtype float16 --port 7001 --enforce-eager --no-enable-chunked-prefill"
)


def test_a_prompt_prefilled_unchunked_is_the_activation_peak():
    for text in (CHUNKING_FORCED_OFF, UNCHUNKED_CRASH):
        assert "prose-activation" in prose(text), text
        assert ranked(text)[0] == "activation-peak", text


def test_chunking_enabled_or_the_flag_on_a_command_line_say_nothing():
    assert "prose-activation" not in prose(CHUNKED_PASSES)
    assert "prose-activation" not in prose(NO_CHUNKING_FLAG)


# --- the weights: too large for the devices, or held twice -------------------------------------------------

# https://github.com/HabanaAI/vllm-fork/pull/2075
WEIGHTS_CANNOT_FIT = (
    "For large bf16 models like Qwen3-235B-A22B, the original bfloat16 weights cannot fit into 4 Gaudi2 HPUs."
)
# https://github.com/GoogleCloudPlatform/kubernetes-engine-samples/pull/1467
TO_FIT_THE_WEIGHTS = (
    "Relatively small HBM capacity (compared to GPUs) means that we need much larger slice sizes to fit the "
    "sharded weights."
)
# https://github.com/sgl-project/sglang/pull/10597
FULL_COPY = """\
I encountered an out-of-memory (OOM) issue while running the grpo_gsm8k example in AReal.
The current implementation creates a full copy of the model weights and uses an NCCL broadcast call to \
load weights from the trainer. This approach significantly increases memory usage, potentially leading to \
OOM errors.
"""
# https://github.com/vllm-project/vllm/pull/47851
TWICE_WHILE_LOADING = (
    "At the cat, the per-expert list and the concatenated result are both live, transiently holding ~2x the "
    "repacked weight footprint."
)
# https://github.com/triton-inference-server/tensorrtllm_backend/issues/481: two copies of the model are two
# tenants of the GPU, not the weights held twice by one.
TWO_COPIES_OF_THE_MODEL = (
    "I'm trying to get the triton server to run two copies of the model, and it overpopulates the first GPU."
)


def test_weights_too_large_or_held_twice_are_read():
    for text in (WEIGHTS_CANNOT_FIT, TO_FIT_THE_WEIGHTS, FULL_COPY, TWICE_WHILE_LOADING):
        assert "prose-weights" in prose(text), text
    assert ranked(FULL_COPY)[0] == "weights-dont-fit"


def test_copies_of_the_model_or_a_logged_sentence_are_not_the_weights():
    assert "prose-weights" not in prose(TWO_COPIES_OF_THE_MODEL)
    assert "prose-weights" not in prose(LOG_PREFIX + WEIGHTS_CANNOT_FIT)


# https://github.com/vllm-project/vllm-ascend/issues/14274: the device was partly taken before the engine
# started (the owner outside the container, invisible to its process table).
USED_BEFORE_STARTUP = """\
Before startup, npu-smi reported 20,687 MB used out of 44,278 MB. This corresponds
to approximately 23.06 GiB free and a requested 50% budget of approximately
21.62 GiB. The container-level process table showed no process, so the owner of
the pre-existing usage could not be identified from inside the container.
"""
# https://github.com/vllm-project/vllm-ascend/issues/5262: the engine's own use before serving (then grew).
USED_BEFORE_INFERENCE = "- Initial GPU memory usage before inference is 54GB;"


def test_memory_used_before_the_engine_started_is_another_tenants():
    assert "prose-other-process" in prose(USED_BEFORE_STARTUP)


def test_memory_used_before_serving_is_the_engines_own():
    assert "prose-other-process" not in prose(USED_BEFORE_INFERENCE)


# --- the context's KV cache: a context length with the memory it needs or the OOM it causes ----------------

# https://github.com/ggml-org/llama.cpp/issues/6032
CONTEXT_NEEDS = (
    "As we can see, an 8192 context size requires *over 20GB of VRAM* for the llama_kv_cache_init. Now "
    "here's a screenshot of a Q8_0 mistral based 70b model being loaded with the same 8192 context size."
)
# https://github.com/kvcache-ai/ktransformers/issues/101
LARGER_CACHE_OOMS = (
    "I've managed to change the kv cache to 8192, however changing it to 16384 results in CUDA out of memory "
    "errors - it tried to allocate on GPU 0 while there was free space on the other GPUs."
)
# https://github.com/TheTom/vllm-swift/issues/18: a long prompt's step, not the context's KV cache.
LONG_PROMPT = (
    "Long prompts (e.g., 40k tokens) at long max_model_len (e.g., 131k) cause vllm-swift's EngineCore to "
    "consume tens of GB of virtual memory on small Macs and either be SIGKILL'd by the OS or compress so "
    "heavily that the system becomes unresponsive."
)


def test_a_context_length_with_its_kv_memory_or_its_oom_is_the_context():
    for text in (CONTEXT_NEEDS, LARGER_CACHE_OOMS):
        assert "prose-context-kv" in prose(text), text
        assert ranked(text)[0] == "max-model-len-exceeds-kv", text


def test_a_long_prompt_or_a_logged_sentence_is_not_the_contexts_kv():
    assert "prose-context-kv" not in prose(LONG_PROMPT)
    assert "prose-context-kv" not in prose(LOG_PREFIX + CONTEXT_NEEDS)


# --- whose workspace: the graphs' while capturing, else the forward pass's ---------------------------------

# https://github.com/vllm-project/vllm-ascend/pull/8111
GRAPH_WORKSPACE = (
    "This PR aims to fix the graph capturing OOM in model_runner_v2. The reason for the problem is that "
    "`workspace` for each graph is not released during capturing, and when the number of the graphs "
    "increases, OOM will happen somehow."
)
# https://github.com/vllm-project/vllm-ascend/issues/15920: a prefill's workspace, no graph in sight.
PREFILL_WORKSPACE = "- Both face the same 18 GiB workspace demand with identically insufficient headroom"


def test_a_workspace_while_capturing_graphs_is_the_capture():
    assert {"prose-cudagraph"} <= prose(GRAPH_WORKSPACE) and "prose-activation" not in prose(GRAPH_WORKSPACE)
    assert ranked(GRAPH_WORKSPACE)[0] == "cuda-graph-capture"


def test_a_workspace_without_graphs_is_still_the_activation():
    assert "prose-activation" in prose(PREFILL_WORKSPACE)


# --- memory kept by the caching allocator, not returned -----------------------------------------------------

# https://github.com/vllm-project/vllm/issues/57440
RETAINED_IN_THE_CACHE = (
    "On discrete GPUs, memory used during weight loading and `process_weights_after_loading` is retained "
    "inside PyTorch's caching allocator pool (`reserved - allocated`) rather than returned to the CUDA "
    "driver before the engine initializes communication buffers, profiles KV cache, or loads secondary "
    "models."
)
# https://github.com/ROCm/ATOM/pull/1649: memory outside the allocator is the communication library's.
HELD_OUTSIDE = (
    "`peak_torch` (allocated high-water) covers model weights + peak activations, but **excludes memory held "
    "outside PyTorch's caching allocator** — RCCL/NCCL channel buffers and attention-backend scratch."
)


def test_memory_kept_by_the_caching_allocator_is_fragmentation():
    assert "prose-fragmentation" in prose(RETAINED_IN_THE_CACHE)
    assert ranked(RETAINED_IN_THE_CACHE)[0] == "fragmentation"


def test_memory_held_outside_the_allocator_is_not():
    assert "prose-fragmentation" not in prose(HELD_OUTSIDE)
