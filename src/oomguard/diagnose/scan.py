"""Reading a text document as lines, fast, in bounded memory.

Small documents (an issue paste, a kubectl describe) are read whole and every line goes to the parsers,
narrative included. Large ones (a 1 GB server log) are read in chunks: the head (startup: flags, ledger) and
the tail (the crash) line by line, the middle only where a line holds one of a few gate substrings that every
failure and load line carries (`bytes.find` per gate runs in C at GB/s, so the Python work is proportional
to the interesting lines, not to the file). Lines longer than MAX_LINE are cut
(and counted), invalid UTF-8 is replaced (and counted): nothing stops the reading.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

# Documents up to this size are read whole and parsed line by line (prose included).
SMALL_DOCUMENT = 4 << 20
CHUNK = 16 << 20
# Small reads for the head: a truncated gzip raises on the read that reaches the cut, losing that read's data.
READ_BLOCK = 64 << 10
# A line longer than this is cut: no log line is that long, a minified JSON blob or binary junk is.
MAX_LINE = 256 << 10
# Lines of context handed to a parser with each line (wrapped messages, the code line under a frame).
FOLLOWING = 3


class Line:
    """One line of a document: its 1-based number, its text and (lazily) the next few lines."""

    __slots__ = ("_after", "no", "text")

    def __init__(self, no: int, text: str, after: tuple[bytes, ...]) -> None:
        self.no = no
        self.text = text
        self._after = after

    def following(self) -> list[str]:
        return [raw.decode("utf-8", "replace") for raw in self._after]


@dataclass
class ReadStats:
    lines: int = 0
    bytes: int = 0
    bad_utf8_lines: int = 0
    cut_lines: int = 0
    truncated: str = ""  # why reading stopped early (corrupt gzip, I/O error)
    prefiltered: bool = False


def _decode(raw: bytes, stats: ReadStats) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.bad_utf8_lines += 1
        return raw.decode("utf-8", "replace")


def read_all(stream: BinaryIO, limit: int) -> tuple[bytes, bool, str]:
    """Up to `limit` bytes; whether the stream ended within them; why reading failed, if it did."""
    parts: list[bytes] = []
    size = 0
    try:
        while size <= limit:
            block = stream.read(min(READ_BLOCK, limit + 1 - size))
            if not block:
                return b"".join(parts), True, ""
            parts.append(block)
            size += len(block)
    except (OSError, EOFError) as err:
        return b"".join(parts), True, f"{type(err).__name__}: {err}"
    return b"".join(parts), False, ""


def _cut_long(lines: list[bytes], stats: ReadStats) -> list[bytes]:
    for i, raw in enumerate(lines):
        if len(raw) > MAX_LINE:
            lines[i] = raw[:MAX_LINE]
            stats.cut_lines += 1
    return lines


def lines_of_small(data: bytes, stats: ReadStats) -> Iterator[Line]:
    """Every line of a small document."""
    raw_lines = data.split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()
    _cut_long(raw_lines, stats)
    stats.lines += len(raw_lines)
    stats.bytes += len(data)
    for i, raw in enumerate(raw_lines):
        raw = raw.rstrip(b"\r")
        yield Line(i + 1, _decode(raw, stats), tuple(raw_lines[i + 1 : i + 1 + FOLLOWING]))


# Beyond the head, the last TAIL bytes (the crash and what led to it) are also parsed line by line.
TAIL = 1 << 20
# The head of a large document parsed line by line (startup: flags, versions, the memory ledger).
HEAD = 1 << 20


def lines_of_large(
    first: bytes, stream: BinaryIO, gates: tuple[bytes, ...], stats: ReadStats
) -> Iterator[Line]:
    """A large document: its head (`first`) and its tail line by line, the middle through the gates.

    Chunks are processed one behind the read, so the last one is known when it is reached."""
    stats.prefiltered = True
    lineno = 0
    cut = first.rfind(b"\n", 0, HEAD) + 1
    head, carry = first[:cut], first[cut:]
    for line in lines_of_small(head, stats):
        yield line
    lineno = stats.lines
    pending: bytes | None = None
    while True:
        try:
            block = stream.read(CHUNK)
        except (OSError, EOFError) as err:
            stats.truncated = f"{type(err).__name__}: {err}"
            block = b""
        stats.bytes += len(block)
        data = carry + block
        if not block:
            body = (pending or b"") + data
            split = body.rfind(b"\n", 0, max(0, len(body) - TAIL)) + 1
            yield from _anchored(body[:split], lineno, gates, stats)
            lineno += body.count(b"\n", 0, split)
            stats.lines += body.count(b"\n", 0, split)
            tail_stats = ReadStats()
            for line in lines_of_small(body[split:], tail_stats):
                yield Line(line.no + lineno, line.text, line._after)
            stats.lines += tail_stats.lines
            stats.bad_utf8_lines += tail_stats.bad_utf8_lines
            stats.cut_lines += tail_stats.cut_lines
            return
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) > MAX_LINE:  # one enormous line: keep its head, drop the rest of it
            stats.cut_lines += 1
            end = len(data)
            data = data[:MAX_LINE] + b"\n"
            end = len(data)
        body, carry = data[:end], data[end:]
        if pending is not None:
            yield from _anchored(pending, lineno, gates, stats)
            newlines = pending.count(b"\n")
            lineno += newlines
            stats.lines += newlines
        pending = body


def _anchored(body: bytes, lineno: int, gates: tuple[bytes, ...], stats: ReadStats) -> Iterator[Line]:
    """Lines of `body` holding a gate substring (bytes.find per gate runs in C at GB/s)."""
    starts: set[int] = set()
    for anchor in gates:
        find, rfind = body.find, body.rfind
        pos = find(anchor)
        while pos >= 0:
            start = rfind(b"\n", 0, pos) + 1
            starts.add(start)
            nl = find(b"\n", pos)
            if nl < 0:
                break
            pos = find(anchor, nl)
    if not starts:
        return
    last_start, last_no = 0, lineno + 1
    count = body.count
    for start in sorted(starts):
        no = last_no + count(b"\n", last_start, start)
        last_start, last_no = start, no
        end = body.find(b"\n", start)
        if end < 0:
            end = len(body)
        raw = body[start:end]
        if len(raw) > MAX_LINE:
            raw = raw[:MAX_LINE]
            stats.cut_lines += 1
        after: list[bytes] = []
        pos = end + 1
        while len(after) < FOLLOWING and pos < len(body):
            nxt = body.find(b"\n", pos)
            if nxt < 0:
                nxt = len(body)
            after.append(body[pos : min(nxt, pos + MAX_LINE)])
            pos = nxt + 1
        yield Line(no, _decode(raw.rstrip(b"\r"), stats), tuple(after))
