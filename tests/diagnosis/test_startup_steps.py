"""The startup step a failure is in, and the engines' own words for a KV pool too small to start (issue 8):
each mechanism from the engine's code or a public thread, with a near-miss text of another class that must
not be taken for it."""

from __future__ import annotations

import io

from oomguard.diagnosis.diagnosis import diagnose
from oomguard.diagnosis.evidence import Evidence, Signal
from oomguard.diagnosis.read import read_one, require_evidence


def ranked(text: str) -> list[str]:
    evidence = Evidence()
    read_one("paste.txt", io.BytesIO(text.encode()), evidence)
    require_evidence(evidence)
    return [c.cls for c in diagnose(evidence).causes]


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
