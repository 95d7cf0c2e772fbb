"""Reading a text document as lines, fast, in bounded memory.

Small documents (an issue paste, a kubectl describe) are read whole and every line goes to the parsers,
narrative included. Large ones (a 1 GB server log) are read as line-aligned chunks of megabytes, which the
gated reader (gated.py) scans for the parsers' triggers, or the full read splits into every line. Lines longer
than MAX_LINE are cut (and counted), invalid UTF-8 is replaced (and counted): nothing stops the reading.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

# Documents up to this size are read whole and parsed line by line (prose included).
SMALL_DOCUMENT = 4 << 20
# Large documents are read in chunks of this size (line-aligned).
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


def lines_of_small(
    data: bytes, stats: ReadStats, first_no: int = 1, lookahead: tuple[bytes, ...] = ()
) -> Iterator[Line]:
    """Every line of `data` (a small document, or one chunk of a large one: its lines are numbered from
    `first_no` and the last ones see `lookahead`, the next chunk's first lines, as following)."""
    raw_lines = data.split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()
    _cut_long(raw_lines, stats)
    stats.lines += len(raw_lines)
    raw_lines.extend(lookahead)
    n = len(raw_lines) - len(lookahead)
    for i in range(n):
        raw = raw_lines[i].rstrip(b"\r")
        yield Line(first_no + i, _decode(raw, stats), tuple(raw_lines[i + 1 : i + 1 + FOLLOWING]))


def head_lines(chunk: bytes) -> tuple[bytes, ...]:
    """The first FOLLOWING lines of a chunk, cut as readers cut them (the following lines of the chunk
    before)."""
    lines: list[bytes] = []
    pos = 0
    while len(lines) < FOLLOWING and pos < len(chunk):
        end = chunk.find(b"\n", pos)
        if end < 0:
            end = len(chunk)
        lines.append(chunk[pos : min(end, pos + MAX_LINE)])
        pos = end + 1
    return tuple(lines)


def iter_chunks(first: bytes, stream: BinaryIO, stats: ReadStats) -> Iterator[bytes]:
    """A large document (`first`, then the rest of `stream`) as line-aligned chunks of at least CHUNK bytes
    (the
    last one may end without a newline). A line longer than MAX_LINE is cut here to MAX_LINE + 1 bytes
    (readers
    count it as cut), so memory stays bounded whatever the input."""
    stats.bytes += len(first)
    parts: list[bytes | memoryview] = [first]
    size = len(first)
    dropping = False  # inside the rest of a cut line: skip to its newline
    while True:
        try:
            block = stream.read(CHUNK)
        except (OSError, EOFError) as err:
            stats.truncated = f"{type(err).__name__}: {err}"
            block = b""
        stats.bytes += len(block)
        if not block:
            if size:
                yield b"".join(parts)
            return
        view = memoryview(block)
        if dropping:
            nl = block.find(b"\n")
            if nl < 0:
                continue
            view, dropping = view[nl:], False
        end = block.rfind(b"\n") + 1
        if end <= len(block) - len(view) or size + end < CHUNK:  # no whole line yet, or not enough of them
            parts.append(view)
            size += len(view)
            if size > CHUNK + MAX_LINE and b"\n" not in block:  # one line as long as a chunk: cut it
                line = b"".join(parts)
                cut = line.rfind(b"\n") + 1
                parts, size = [line[: cut + MAX_LINE + 1]], cut + MAX_LINE + 1
                dropping = True
            continue
        start = len(block) - len(view)
        parts.append(view[: end - start])
        yield b"".join(parts)
        parts, size = [view[end - start :]], len(block) - end


def lines_of_chunks(chunks: Iterator[bytes], stats: ReadStats) -> Iterator[Line]:
    """Every line of a chunked document, numbered through, each with its following lines."""
    pending: bytes | None = None
    first_no = 1
    for chunk in chunks:
        if pending is not None:
            before = stats.lines
            yield from lines_of_small(pending, stats, first_no, head_lines(chunk))
            first_no += stats.lines - before
        pending = chunk
    if pending is not None:
        yield from lines_of_small(pending, stats, first_no, ())
