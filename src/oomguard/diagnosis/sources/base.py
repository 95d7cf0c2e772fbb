"""What every line parser gets: the document context (where facts go) and the line split from its prefix."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import ClassVar

from oomguard.diagnosis.evidence import Evidence, Fact, OomMessage, Signal, StartupNumber, Where, clip
from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.triggers import Series, Triggers


@dataclass(frozen=True)
class AllocatorReport:
    """The quantities of one out-of-memory message (bytes; None where the format does not say): the
    allocator's (allocator.py reads every PyTorch format), or an engine's own."""

    flavor: str  # 'torch' | 'torch-old' | 'expandable-segments' | 'cuda-runtime' | 'hsa' | 'xpu' | 'engine'
    requested: int | None = None
    device: int | None = None
    total: int | None = None
    free: int | None = None
    this_process: int | None = None
    processes: tuple[tuple[int, int], ...] = ()
    allocated: int | None = None
    private_pools: int | None = None
    reserved_unallocated: int | None = None
    largest_free: int | None = None  # the largest contiguous free block, where the allocator prints it


# An out-of-memory message that says nothing but that an engine ran out (no size, no device).
ENGINE_OOM = AllocatorReport("engine")


class Context:
    """One document being parsed: its name, the evidence store facts go to, and how many were added."""

    def __init__(self, source: str, evidence: Evidence) -> None:
        self.source = source
        self.evidence = evidence
        self.facts = 0
        self.skipped: list[str] = []  # what a parser recognised but could not read, for the report
        self.time: float | None = None  # the timestamp of the line being parsed, when it has one

    def where(self, line: Line) -> Where:
        return Where(self.source, line.no, self.time)

    def where_no(self, no: int) -> Where:
        return Where(self.source, no)

    def emit(self, fact: Fact) -> None:
        self.evidence.add(fact)
        self.facts += 1

    def signal(self, line: Line, text: str, name: str, **numbers: float | None) -> None:
        """A Signal at `line` with the named numbers that are known (None ones are left out)."""
        nums = tuple((k, float(v)) for k, v in numbers.items() if v is not None)
        self.emit(Signal(where=self.where(line), text=clip(text), name=name, numbers=nums))

    def startup_number(self, line: Line, msg: Message, quantity: str, value: float | None) -> None:
        """A StartupNumber at `line`, when the value was read."""
        if value is not None:
            self.emit(
                StartupNumber(
                    where=self.where(line),
                    text=clip(msg.body),
                    quantity=quantity,
                    value=value,
                    process_tag=msg.tag,
                )
            )

    def oom(self, line: Line, text: str, report: AllocatorReport, process_tag: str = "") -> None:
        """An OomMessage at `line` with the report's quantities."""
        self.emit(
            OomMessage(
                where=self.where(line),
                text=clip(text),
                flavor=report.flavor,
                requested=report.requested,
                device=report.device,
                total=report.total,
                free=report.free,
                this_process=report.this_process,
                processes=report.processes,
                allocated=report.allocated,
                private_pools=report.private_pools,
                reserved_unallocated=report.reserved_unallocated,
                largest_free=report.largest_free,
                process_tag=process_tag,
            )
        )

    def clip(self, text: str) -> str:
        return clip(text)


@dataclass(frozen=True)
class Message:
    """A log line without its decorations: `tag` is the process prefix ('EngineCore_DP0 pid=12',
    'Worker_TP1_EP1', 'DP0 TP0', 'rank0'), `level` the log level, `body` the message itself."""

    tag: str
    level: str
    body: str
    prefixed: bool
    time: float | None = None  # seconds since the start of the year, from the line's timestamp (for gaps)


# Decorations found in front of vLLM / SGLang / Python log messages, in the order they appear.
_GREP_N = re.compile(r"^\d{1,9}[:-](?=\S)(?!\d{2}-\d{2}[T ]\d)")  # `grep -n` (not an ISO date's year)
_COMPOSE = re.compile(r"^[\w.-]{1,64}\s+\|\s?")
# DJL Serving's wrapper of its Python engine's output: "WARN  PyProcess W-252-model-stderr: ..."
_DJL = re.compile(r"^(?:INFO|WARN|ERROR|DEBUG)\s+PyProcess\s+[\w-]+:\s?")
_ISO_TIME = re.compile(
    r"^\d{4}-(?P<mon>\d{2})-(?P<day>\d{2})[T ](?P<hms>\d{2}:\d{2}:\d{2})(?:[.,]\d+)?"
    r"(?:Z|[+-]\d{2}:?\d{2})?\s+"
)
_PROC_TAG = re.compile(r"^\((?P<tag>[A-Za-z][\w]*(?:[ _][^()]{0,80})?)\)\s*")
_RANK = re.compile(r"^\[(?P<tag>rank\d+)\]:\s*")
_SGLANG = re.compile(
    r"^\[\d{4}-(?P<mon>\d{2})-(?P<day>\d{2}) (?P<hms>\d{2}:\d{2}:\d{2})(?:\.\d+)?"
    r"(?P<tag>(?: [A-Z]+\d+)*)\]\s*"
)
_LEVEL = re.compile(
    r"^(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\b:?\s*"
    r"(?:(?P<mon>\d{2})-(?P<day>\d{2}) (?P<hms>\d{2}:\d{2}:\d{2})(?:\.\d+)?\s*)?"
    r"(?:\[[\w./<> -]+:\d+\]\s*|[\w./-]+\.py:\d+\]\s*)?"
)
_FILEINFO = re.compile(r"^\[[\w./-]+\.py:\d+\]\s*")


def _seconds(m: re.Match[str]) -> float | None:
    """'MM-DD HH:MM:SS' as seconds into the year (31-day months: only gaps within a log are compared)."""
    hms = m.group("hms")
    if not hms:
        return None
    h, mi, sec = hms.split(":")
    return (((int(m.group("mon")) * 31 + int(m.group("day"))) * 24 + int(h)) * 60 + int(mi)) * 60 + int(sec)


def split_prefix(text: str) -> Message:
    """The line without its decorations. Each line is split as itself and again as the line following
    the one before (`continuation`): the last few splits are kept (Message is frozen)."""
    return _split_body(text.strip("\r\n"))


@functools.lru_cache(maxsize=64)
def _split_body(body: str) -> Message:
    tag = level = ""
    time: float | None = None
    start = body
    body = body.lstrip()
    for _ in range(2):  # "[rank0]: (Worker pid=1) ERROR ..." and the like nest at most twice
        for pattern in (_GREP_N, _COMPOSE, _DJL, _ISO_TIME, _SGLANG, _PROC_TAG, _RANK):
            m = pattern.match(body)
            if m:
                groups = m.groupdict()
                if groups.get("tag"):
                    tag = m.group("tag").strip()
                if "hms" in groups and time is None:
                    time = _seconds(m)
                body = body[m.end() :]
        m = _LEVEL.match(body)
        if m:
            level = m.group("level")
            if time is None:
                time = _seconds(m)
            body = body[m.end() :]
        m = _FILEINFO.match(body)
        if m:
            body = body[m.end() :]
    return Message(tag, level, body, body != start.lstrip(), time)


# A line that starts a message of its own (an exception, a traceback), never a wrapped continuation.
_NEW_MESSAGE = re.compile(r"^(?:[\w.]+(?:Error|Exception|Exit)\b|Traceback|File \")")


def continuation(following: list[str], limit: int = 3) -> list[str]:
    """The wrapped continuation of a message: following lines that carry no log prefix of their own."""
    out: list[str] = []
    for raw in following[:limit]:
        if not raw.strip():
            break
        msg = split_prefix(raw)
        if (msg.prefixed and (msg.level or msg.tag)) or _NEW_MESSAGE.match(msg.body.strip()):
            break
        out.append(raw.strip())
    return out


# Sizes as logs print them. vLLM and SGLang print GiB values with a "GB" label (their "GB" is 2**30), and
# PyTorch prints binary units, so every G/M/K unit here is binary. "bytes"/"B" are bytes.
_UNIT = {
    "": 1,
    "b": 1,
    "bytes": 1,
    "byte": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tb": 1 << 40,
    "tib": 1 << 40,
}
SIZE = r"(?:-?[\d,]*\.?\d+)\s*(?:[KMGT]i?B|bytes?|B)\b"
_SIZE_PARTS = re.compile(r"(-?[\d,]*\.?\d+)\s*([KMGT]i?B|bytes?|B)?", re.IGNORECASE)


def log_size(text: str) -> int | None:
    """'1.15 GiB' -> bytes; '0 bytes' -> 0; '2.3463 GB' -> GiB (see above)."""
    m = _SIZE_PARTS.search(text)
    if not m:
        return None
    try:
        value = float(m.group(1).replace(",", ""))
    except ValueError:
        return None
    return round(value * _UNIT.get((m.group(2) or "").lower(), 1))


# A closing typographic quote or full-width punctuation ends a command a sentence quotes ("使用“vllm serve
# ... --dtype half”部署，报错："): no shell word holds one.
_COMMAND_END = re.compile(r"[”’」』，。：；（）]")


def command_part(text: str) -> str:
    """The command in a line that quotes it in a sentence: the text before the punctuation that ends it."""
    return _COMMAND_END.split(text, maxsplit=1)[0]


def to_int(text: str) -> int | None:
    try:
        return int(text.replace(",", "").replace(" ", "").replace("_", ""))
    except ValueError:
        return None


def to_float(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


class LineParser:
    """One evidence kind's reader: fed the lines of a text with their prefix split off, told when the text
    ends.

    A large text's reader feeds it only the lines holding one of its TRIGGERS (and every line while it is
    busy);
    see triggers.py for the contract."""

    TRIGGERS: ClassVar[Triggers]
    SERIES: ClassVar[tuple[Series, ...]] = ()

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def busy(self) -> bool:
        """Inside a multi-line block: every line matters, triggers or not."""
        return False

    def feed(self, line: Line, msg: Message) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """Most readers emit facts as lines arrive: nothing left to flush."""
