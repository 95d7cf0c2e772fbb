"""Narrative text around the logs (issue bodies, notes, chat pastes): statements of mechanism.

People describe what they saw ("memory keeps increasing until the pod is OOMKilled", "only with a draft
model"). Each statement is reduced to one mechanism signal; a negated one ("not related to CUDA graph
capture") is kept as its negation. Only read in small documents: a server log is not prose. Boilerplate
that every PyTorch OOM message carries ("to avoid fragmentation", "expandable_segments") is ignored.
"""

from __future__ import annotations

import re

from oomguard.diagnose.evidence import Signal
from oomguard.diagnose.scan import Line
from oomguard.diagnose.sources.base import Context, LineParser, Message

# Text that appears inside tool output and says nothing about this failure.
BOILERPLATE = (
    "to avoid fragmentation",
    "reserved but unallocated memory is large",
    "Tried to allocate",
    "If you are running out of memory",
    "CUDA graphs can take additional",
    "To disable, set",
    "See documentation for Memory Management",
    "is reserved by PyTorch",
)

_NEG = re.compile(r"\b(not|no|never|n't|without|isn't|wasn't|doesn't|don't)\b[^.;,]{0,30}$")
_OOM = r"(oom|out of memory|out-of-memory|killed|enomem|crash|dies|dead|fail)"
_MEM = r"(memory|oom|out of memory|gib|gb|mib|vram|profil|headroom|blocks|kv)"

# (signal, pattern that must match, optional second pattern that must also match somewhere in the line)
RULES: tuple[tuple[str, re.Pattern[str], re.Pattern[str] | None], ...] = (
    ("prose-leak", re.compile(r"\bleak"), None),
    (
        "prose-growth",
        re.compile(
            r"(keeps?|continu\w*|steadily|gradually|slowly|monotonic\w*|constantly)\s+(\w+\s+)?(ris|increas|grow|climb)"
            r"|(ris\w*|increas\w*|grow\w*|climb\w*)\s+(\w+\s+)?(over time|continuously|steadily|until|without bound)"
            r"|(does|did)\s*(not|n't)\s+(fall|drop|go down|decrease|come down)|not being (cleared|freed|released)"
            r"|never (freed|released|drops)"
        ),
        None,
    ),
    ("prose-fragmentation", re.compile(r"fragment|split(s|ting)? the block|max_split_size"), None),
    (
        "prose-host-memory",
        re.compile(
            r"\b(host|cpu memory|system memory|node memory|container|pod|ram|rss|cgroup|page cache|memory limit)\b"
        ),
        re.compile(rf"{_OOM}|\blimit\b|ooms\b"),
    ),
    (
        "prose-activation",
        re.compile(r"activation|workspace|intermediate tensor|padding|padded|prefill peak"),
        re.compile(_MEM),
    ),
    (
        "prose-spec-decode",
        re.compile(r"speculative|draft model|\beagle\b|\bmtp\b|medusa|spec[_ -]decod"),
        re.compile(_MEM),
    ),
    ("prose-lora", re.compile(r"\blora\b"), re.compile(_MEM)),
    (
        "prose-ep-buffer",
        re.compile(
            r"deepep|deep_ep|all2all|all-to-all|all_to_all|nvshmem|dispatch buffer|low_latency buffer|ep buffer|\ba2a\b"
        ),
        None,
    ),
    (
        "prose-dp-blocks-differ",
        re.compile(r"\bblocks?\b|kv cache"),
        re.compile(
            r"(ranks?|replicas?|\bdp\d*\b).*(spread|differ|mismatch|imbalanc|inconsistent|vary|varies)"
            r"|(spread|differ|mismatch|imbalanc|inconsistent|vary|varies).*(ranks?|replicas?|\bdp\d*\b)"
        ),
    ),
    ("prose-cudagraph", re.compile(r"cuda ?graph|graph capture|capturing"), re.compile(_MEM)),
    (
        "prose-library-regression",
        re.compile(
            r"\bnccl\b|cublas|\bdriver\b|rebuild|regression|regressed|after upgrad|torch \d|pytorch \d"
        ),
        re.compile(_MEM),
    ),
    ("prose-logprobs", re.compile(r"prompt_logprobs|\blogprobs\b|logits over|full[- ]vocab"), None),
    ("prose-kv-full", re.compile(r"kv[ -]cache"), re.compile(r"\bfull\b|exhaust|100%|saturat|preempt")),
    (
        "prose-other-process",
        re.compile(
            r"another process|other process|second (llm|model|instance|engine)|same gpu|shared gpu|del\(?\s*llm|"
            r"garbage.collect|\bmig\b|co-?located|other tenants?"
        ),
        None,
    ),
    (
        "prose-multimodal",
        re.compile(r"\bimages?\b|vision|pixel|\bvideo|multimodal|multi-modal|\bencoder\b"),
        re.compile(_MEM),
    ),
)


class Parser(LineParser):
    # Prose is only read in small documents (read whole), never through the gates.
    GATES = ()

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.seen: set[str] = set()

    def feed(self, line: Line, msg: Message) -> None:
        text = line.text.strip()
        if len(text) < 12 or len(text) > 4000 or any(b in text for b in BOILERPLATE):
            return
        if msg.level in ("INFO", "DEBUG") and "Error" not in text:
            return  # a vLLM INFO line is the engine talking, not a person describing
        low = text.lower()
        for name, first, second in RULES:
            m = first.search(low)
            if not m or (second is not None and not second.search(low)):
                continue
            negated = bool(_NEG.search(low[: m.start()]))
            if negated:
                if name == "prose-cudagraph":
                    self._emit(line, text, "prose-not-cudagraph")
                continue
            self._emit(line, text, name)

    def _emit(self, line: Line, text: str, name: str) -> None:
        self.ctx.emit(Signal(where=self.ctx.where(line), text=self.ctx.clip(text), name=name))
