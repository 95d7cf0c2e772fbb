"""How the bytes of a text log are framed, and the stream that undoes the framing before any reader sees it.

The readers (detection, the gated reader, every line parser) take UTF-8 lines ended by `\\n`. Logs reach
people framed otherwise, and the same evidence must give the same answer whatever the framing:
- UTF-16, with or without a BOM: what Windows PowerShell 5.1's `>` writes (`kubectl logs pod > log.txt`);
  read as UTF-8 it is NUL bytes between letters, "binary";
- CR-only line endings (classic Mac OS, some terminal captures): the whole log is one line;
- Docker's json-file driver, how container logs sit on a node (`/var/lib/docker/containers/*/*-json.log`):
  one `{"log": "<line>\\n", "stream": "stderr", "time": "..."}` object per line, the quotes of the log's own
  text escaped (`File \\"...\\"`), so no line parser recognises a frame. A line longer than 16 KiB is split by
  Docker over several objects, the last one ending in `\\n`: joined again here.

Each is recognised from the document's first bytes and undone as the document streams (memory stays bounded:
a Docker line that never ends is passed on as it is past MAX_PENDING).
"""

from __future__ import annotations

import codecs
import enum
import io
import json
import re
from typing import Any, BinaryIO, cast

# Bytes of the head looked at to recognise the framing.
HEAD_BYTES = 64 << 10
# Source blocks read at once.
BLOCK = 1 << 20
# A Docker line without its end kept at most this long before it is passed on unparsed.
MAX_PENDING = 1 << 20
# Share of the head's even (odd) bytes that are NUL in ASCII-heavy UTF-16BE (LE) text: a log is mostly ASCII.
UTF16_NUL_SHARE = 0.4

_DOCKER_LINE = re.compile(rb'^\{"log": ?"')


class Framing(enum.Enum):
    PLAIN = "plain"
    UTF16_LE = "utf-16-le"
    UTF16_BE = "utf-16-be"
    UTF16_BOM = "utf-16"  # the BOM says which
    CR_ONLY = "cr-only"
    DOCKER_JSON = "docker-json"


def framing_of(head: bytes) -> Framing:
    """The framing a document's first bytes show (PLAIN when nothing needs undoing)."""
    if head[:1] == b"\x80":  # a pickle's PROTO opcode: binary, for the snapshot reader as it is
        return Framing.PLAIN
    # a BOM alone is two bytes any binary or latin-1 text may start with: the text after it must be UTF-16 too
    bom = head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
    utf16 = _utf16_without_bom(head[2:] if bom else head)
    if utf16 is not None:
        return Framing.UTF16_BOM if bom else utf16
    first, newline, _ = head.partition(b"\n")
    if _DOCKER_LINE.match(first) and _is_docker_record(first, complete=bool(newline)):
        return Framing.DOCKER_JSON
    if b"\r" in head and not newline:
        return Framing.CR_ONLY
    return Framing.PLAIN


def _utf16_without_bom(head: bytes) -> Framing | None:
    """UTF-16 text of a mostly ASCII log: NUL in every other byte, and the text decodes to printable."""
    sample = head[: min(len(head), 4096) // 2 * 2]
    if len(sample) < 16:
        return None
    even, odd = sample[0::2], sample[1::2]
    for framing, zeros, other in ((Framing.UTF16_LE, odd, even), (Framing.UTF16_BE, even, odd)):
        if zeros.count(0) > UTF16_NUL_SHARE * len(zeros) and other.count(0) < 0.05 * len(other):
            text = sample.decode(framing.value, "replace")
            control = sum(1 for c in text if c < " " and c not in "\t\r\n" or c == "\ufffd")
            if control < 0.05 * len(text):
                return framing
    return None


def _is_docker_record(line: bytes, *, complete: bool) -> bool:
    if not complete:  # the head cut a long first record: its opening is all there is to judge
        return True
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return (
        isinstance(record, dict)
        and isinstance(record.get("log"), str)
        and ("stream" in record or "time" in record)
    )


def unframed(stream: BinaryIO, head: bytes) -> tuple[BinaryIO, Framing]:
    """`stream` as UTF-8 lines ended by `\\n` (itself when it already is), and the framing undone."""
    framing = framing_of(head)
    if framing is Framing.PLAIN:
        return stream, framing
    if framing is Framing.CR_ONLY:
        transform: _Transform = _CrOnly()
    elif framing is Framing.DOCKER_JSON:
        transform = _DockerJson()
    else:
        transform = _Utf16(framing.value)
    return cast(BinaryIO, io.BufferedReader(_Reframed(stream, transform), BLOCK)), framing


class _Transform:
    def feed(self, block: bytes, final: bool) -> bytes:
        raise NotImplementedError


class _CrOnly(_Transform):
    def feed(self, block: bytes, final: bool) -> bytes:
        return block.replace(b"\r", b"\n")


class _Utf16(_Transform):
    def __init__(self, encoding: str) -> None:
        self._decoder = codecs.getincrementaldecoder(encoding)(errors="replace")

    def feed(self, block: bytes, final: bool) -> bytes:
        return self._decoder.decode(block, final).encode("utf-8")


class _DockerJson(_Transform):
    """Each record's `log` text; a line that is no record passes as it is (a log the driver did not write)."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, block: bytes, final: bool) -> bytes:
        data = self._pending + block
        end = len(data) if final else data.rfind(b"\n") + 1
        self._pending = data[end:]
        out = [self._line(line) for line in data[:end].splitlines(keepends=True)]
        if len(self._pending) > MAX_PENDING:
            out.append(self._pending)
            self._pending = b""
        return b"".join(out)

    @staticmethod
    def _line(line: bytes) -> bytes:
        if not line.startswith(b'{"log":'):
            return line
        try:
            record: Any = json.loads(line)
        except (ValueError, RecursionError):
            return line
        text = record.get("log") if isinstance(record, dict) else None
        return text.encode("utf-8", "replace") if isinstance(text, str) else line


class _Reframed(io.RawIOBase):
    """A stream read through a transform, block by block."""

    def __init__(self, source: BinaryIO, transform: _Transform) -> None:
        self._source = source
        self._transform = transform
        self._out = b""
        self._pos = 0
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._pos >= len(self._out) and not self._done:
            block = self._source.read(BLOCK)
            self._done = not block
            self._out, self._pos = self._transform.feed(block, self._done), 0
        n = min(len(buffer), len(self._out) - self._pos)
        buffer[:n] = self._out[self._pos : self._pos + n]
        self._pos += n
        return n
