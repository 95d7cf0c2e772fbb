"""Reading a text document as lines, fast, in bounded memory.

Small documents (an issue paste, a kubectl describe) are read whole and every line goes to the parsers,
narrative included. Large ones (a 1 GB server log) are read in chunks and only lines holding one of the
parsers' anchor substrings are decoded and parsed: `bytes.find` per anchor runs in C at GB/s, so the
Python work is proportional to the interesting lines, not to the file. Lines longer than MAX_LINE are cut
(and counted), invalid UTF-8 is replaced (and counted): nothing stops the reading.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO, Iterator

# Documents up to this size are read whole and parsed line by line (prose included).
SMALL_DOCUMENT = 4 << 20
CHUNK = 16 << 20
# A line longer than this is cut: no log line is that long, a minified JSON blob or binary junk is.
MAX_LINE = 256 << 10
# Lines of context handed to a parser with each line (wrapped messages, the code line under a frame).
FOLLOWING = 3


class Line:
    """One line of a document: its 1-based number, its text and (lazily) the next few lines."""

    __slots__ = ("no", "text", "_after")

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
            block = stream.read(min(CHUNK, limit + 1 - size))
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


def lines_of_large(first: bytes, stream: BinaryIO, anchors: tuple[bytes, ...], stats: ReadStats) -> Iterator[Line]:
    """The anchored lines of a large document, read in chunks; line numbers are exact."""
    stats.prefiltered = True
    carry = b""
    lineno = 0  # lines completed before the current chunk
    pending: bytes | None = first
    overlong = False  # inside a line longer than MAX_LINE whose head was kept
    while True:
        if pending is not None:
            block, pending = pending, None
        else:
            try:
                block = stream.read(CHUNK)
            except (OSError, EOFError) as err:
                stats.truncated = f"{type(err).__name__}: {err}"
                block = b""
        stats.bytes += len(block)
        if not block:
            if carry:
                stats.lines += 1
                yield from _anchored(carry, lineno, anchors, stats)
            return
        if overlong:
            cut = block.find(b"\n")
            if cut < 0:
                continue
            block = block[cut + 1 :]
            overlong = False
            lineno += 1
        data = carry + block if carry else block
        end = data.rfind(b"\n")
        if end < 0:
            if len(data) > MAX_LINE:
                stats.cut_lines += 1
                carry, overlong = data[:MAX_LINE], True
                yield from _anchored(carry, lineno, anchors, stats)
                carry = b""
            else:
                carry = data
            continue
        body, carry = data[: end + 1], data[end + 1 :]
        if len(carry) > MAX_LINE:
            stats.cut_lines += 1
            yield from _anchored(carry[:MAX_LINE], lineno + body.count(b"\n"), anchors, stats)
            carry, overlong = b"", True
        yield from _anchored(body, lineno, anchors, stats)
        newlines = body.count(b"\n")
        stats.lines += newlines
        lineno += newlines


def _anchored(body: bytes, lineno: int, anchors: tuple[bytes, ...], stats: ReadStats) -> Iterator[Line]:
    starts: set[int] = set()
    for anchor in anchors:
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
