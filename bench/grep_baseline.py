"""The baseline diagnose has to beat: a keyword grep written from a vLLM OOM triage guide in an afternoon.

Each class has a few case-insensitive keywords; a report's ranking is the classes ordered by how many of their
keywords occur (ties in the order below, the guide's order of likelihood). No parsing, no numbers, no phases:
if diagnose is not well above this on reports it has never seen, its parsing and rules earn nothing.
"""

from __future__ import annotations

import re

KEYWORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "host-ram-oom",
        (r"exit code 137", r"oomkilled", r"killed process", r"\bkilled\b", r"oom-kill", r"cgroup"),
    ),
    (
        "max-model-len-exceeds-kv",
        (r"max seq len", r"max_model_len", r"larger than the maximum number of tokens"),
    ),
    ("kv-cache-insufficient-at-startup", (r"no available memory for the cache blocks", r"kv cache memory")),
    ("weights-dont-fit", (r"load_model", r"load_weights", r"loading took", r"weight")),
    ("cuda-graph-capture", (r"cuda ?graph", r"capture")),
    ("sampler-or-logits", (r"sampler", r"logits", r"logprobs")),
    ("other-process-or-shared-gpu", (r"free memory on device", r"process \d+ has", r"another process")),
    ("ep-all2all-buffer", (r"deepep", r"deep_ep", r"nvshmem", r"all2all")),
    ("dp-replica-kv-accounting", (r"data.parallel", r"\bdp\d")),
    ("kv-exhaustion-at-runtime", (r"kv cache usage: 9\d", r"kv cache usage: 100", r"preempt")),
    ("fragmentation", (r"reserved by pytorch but unallocated", r"fragment")),
    ("memory-leak", (r"leak", r"keeps? (increasing|growing)")),
    ("multimodal-encoder", (r"vision", r"image", r"encoder", r"multimodal")),
    ("spec-decode-or-lora-extra", (r"speculative", r"draft", r"eagle", r"lora")),
    ("int32-index-overflow", (r"int32", r"canuse32bitindexmath", r"illegal memory access")),
    ("activation-peak", (r"tried to allocate", r"out of memory", r"forward")),
)
_COMPILED = tuple((cls, tuple(re.compile(k) for k in keys)) for cls, keys in KEYWORDS)


def rank(evidence: str) -> list[str]:
    """Classes with at least one keyword, most keywords first; 'other' when none matches."""
    low = evidence.lower()
    hits = [(sum(1 for k in keys if k.search(low)), i, cls) for i, (cls, keys) in enumerate(_COMPILED)]
    ranked = [cls for n, _, cls in sorted(hits, key=lambda h: (-h[0], h[1])) if n > 0]
    return ranked or ["other"]
