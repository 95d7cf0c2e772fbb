"""What kind of evidence a document is, from its name and its first bytes.

Most evidence is text that mixes kinds (a vLLM log holding a traceback, an issue body quoting nvidia-smi and
dmesg), so every text document goes through all line parsers; detection only routes the formats that need
their own reader (pickles, Prometheus scrapes, cgroup files whose content is a bare number) and refuses
binary data.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

KIND_PICKLE = "torch-snapshot"
KIND_METRICS = "prometheus-metrics"
KIND_CGROUP = "cgroup"
KIND_BINARY = "binary"
KIND_EMPTY = "empty"
KIND_TEXT = "text"

# cgroup v2 and v1 memory controller files whose content is a number or "key value" lines.
CGROUP_FILES = frozenset(
    {
        "memory.events",
        "memory.events.local",
        "memory.max",
        "memory.high",
        "memory.current",
        "memory.peak",
        "memory.swap.current",
        "memory.swap.max",
        "memory.stat",
        "memory.limit_in_bytes",
        "memory.usage_in_bytes",
        "memory.max_usage_in_bytes",
        "memory.failcnt",
        "memory.oom_control",
        "memory.memsw.limit_in_bytes",
    }
)

_PROM_SAMPLE = re.compile(
    rb"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}\n]*\})?\s+[-+0-9.eEaNIinf]+(\s+-?\d+)?\s*$", re.MULTILINE
)


def base_name(name: str) -> str:
    """'bundle.tgz!sys/fs/cgroup/memory.events' -> 'memory.events'."""
    return PurePosixPath(name.rsplit("!", 1)[-1].replace("\\", "/")).name


def looks_binary(head: bytes) -> bool:
    """NUL bytes, or mostly non-text bytes, in the first block (UTF-8 multibyte text is text)."""
    if not head:
        return False
    if b"\x00" in head:
        return True
    sample = head[:4096]
    control = sum(1 for b in sample if b < 9 or 13 < b < 32 or b == 127)
    return control > len(sample) * 0.10


def is_pickle(head: bytes) -> bool:
    """Protocol 2+ pickles open with PROTO (0x80) and the protocol number."""
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def detect(name: str, head: bytes) -> str:
    base = base_name(name)
    if not head.strip():
        return KIND_EMPTY
    if is_pickle(head) or base.endswith((".pickle", ".pkl")):
        return KIND_PICKLE
    if looks_binary(head):
        return KIND_BINARY
    if base in CGROUP_FILES:
        return KIND_CGROUP
    text_head = head[:65536]
    if (
        text_head.startswith((b"# HELP ", b"# TYPE "))
        or base in ("metrics", "metrics.txt", "metrics.prom")
        or (len(_PROM_SAMPLE.findall(text_head)) >= 3 and (b"# TYPE " in text_head or b"vllm:" in text_head))
    ):
        return KIND_METRICS
    return KIND_TEXT
