"""The closed set of root-cause classes a diagnosis ranks (the triage guide's taxonomy).

A `StrEnum`, so a class is its own name wherever text is wanted (JSON, the report, the bench's labels) and
a rule naming a class that does not exist fails when it runs instead of scoring a class nobody ranks.
"""

from __future__ import annotations

from enum import StrEnum


class CauseClass(StrEnum):
    WEIGHTS_DONT_FIT = "weights-dont-fit"
    KV_CACHE_INSUFFICIENT_AT_STARTUP = "kv-cache-insufficient-at-startup"
    MAX_MODEL_LEN_EXCEEDS_KV = "max-model-len-exceeds-kv"
    ACTIVATION_PEAK = "activation-peak"
    SAMPLER_OR_LOGITS = "sampler-or-logits"
    CUDA_GRAPH_CAPTURE = "cuda-graph-capture"
    EP_ALL2ALL_BUFFER = "ep-all2all-buffer"
    DP_REPLICA_KV_ACCOUNTING = "dp-replica-kv-accounting"
    KV_EXHAUSTION_AT_RUNTIME = "kv-exhaustion-at-runtime"
    FRAGMENTATION = "fragmentation"
    MEMORY_LEAK = "memory-leak"
    OTHER_PROCESS_OR_SHARED_GPU = "other-process-or-shared-gpu"
    HOST_RAM_OOM = "host-ram-oom"
    MULTIMODAL_ENCODER = "multimodal-encoder"
    SPEC_DECODE_OR_LORA_EXTRA = "spec-decode-or-lora-extra"
    INT32_INDEX_OVERFLOW = "int32-index-overflow"
    OTHER = "other"
