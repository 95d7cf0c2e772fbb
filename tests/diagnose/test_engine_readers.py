"""Other engines' memory failures read as typed facts: llama.cpp / ollama / ik_llama.cpp, systemd's verdict on
a service the OOM killer hit, the kernel's memory-cgroup usage line. Each text is real, from the public thread
cited above it; the step it failed in decides the class, read from the engine's own lines."""

from __future__ import annotations

import io

import oomguard
from oomguard.diagnose.evidence import Evidence, Frame, HostMemory, OomMessage, Signal
from oomguard.diagnose.read import read_one
from oomguard.units import GiB, MiB


def read(text: str) -> Evidence:
    evidence = Evidence()
    evidence.documents.append(read_one("evidence.log", io.BytesIO(text.encode()), evidence))
    return evidence


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
    assert s.number("context_tokens") == 1048576
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
    assert s.number("kv_bytes") == 51200 * MiB  # the KV buffer, not the "KV self size" summary
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
