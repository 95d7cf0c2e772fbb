"""Files and JSON from users, read with bounds: no input can hang oomguard or blow its memory.

- `read_bounded`: a path may be a regular file, a FIFO (`<(cmd)`, `mkfifo`), a character device
  (`/dev/zero`) or anything else `open()` accepts. A regular file over the limit is refused by its size
  before a byte is read; anything else is read in chunks until the limit (an endless stream is refused,
  not buffered) or until nothing arrives for `STALL_S` seconds (a FIFO without a writer).
- `open_bounded`: the same checks for a file read as it streams (a trace of millions of rows).
- `loads_json`: `json.loads` that refuses nesting deeper than the parser's stack (RecursionError) and
  numbers that are not finite or not representable (`NaN`, `Infinity`, `1e400`, `10**400`), in one line
  naming the input.
"""

from __future__ import annotations

import io
import json
import math
import os
import select
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from oomguard.errors import OomguardError

CHUNK_BYTES = 1 << 20
STALL_S = 10.0  # a stream that sends nothing for this long is not coming
# An integer with more digits cannot become a float (1.8e308) and breaks arithmetic; smaller absurd values
# reach the readers, which name the key ("beyond any real model").
MAX_INT_DIGITS = 300
MAX_CONFIG_BYTES = 8 << 20  # YAML/JSON configs, manifests, command files: real ones are kilobytes
# An engine's own --config file is a flat mapping of launch flags (vLLM's `vllm serve --config`): a few
# hundred bytes; one MiB is far beyond any real one and still parses in well under a second.
MAX_ENGINE_CONFIG_BYTES = 1 << 20


def read_bounded(path: str | os.PathLike[str], *, limit: int, what: str, error: type[OomguardError]) -> bytes:
    """The bytes of `path`, at most `limit`; `error` (one line naming `what`) for anything else."""
    name = os.fspath(path)
    fd, stream = _open_checked(name, limit, what, error)
    try:
        return _read_up_to(fd, limit, name, what, error, stream=stream)
    finally:
        os.close(fd)


@contextmanager
def open_bounded(
    path: str | os.PathLike[str], *, limit: int, what: str, error: type[OomguardError]
) -> Iterator[io.BufferedReader[_BoundedRaw]]:
    """`path` as a buffered binary file to stream (line by line, say) with `read_bounded`'s checks: what
    passes `limit` bytes, or stalls for `STALL_S` seconds, raises `error` from the read that meets it."""
    name = os.fspath(path)
    fd, stream = _open_checked(name, limit, what, error)
    raw = _BoundedRaw(fd, limit, name, what, error, stream)
    with io.BufferedReader(raw, CHUNK_BYTES) as reader:
        yield reader


def _open_checked(name: str, limit: int, what: str, error: type[OomguardError]) -> tuple[int, bool]:
    """An open descriptor of `name` and whether it is a stream (not a regular file, so of unknown size);
    a regular file over `limit` is refused by its size before a byte is read."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{what} {name}: no such file") from None
    except OSError as err:
        raise error(f"cannot read {what} {name}: {err.strerror or err}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise error(f"{what} {name} is a directory")
        if stat.S_ISREG(info.st_mode):
            if info.st_size > limit:
                raise error(f"{what} {name} is {info.st_size / 2**20:.1f} MiB, more than {_mib(limit)}")
            os.set_blocking(fd, True)
            return fd, False
    except BaseException:
        os.close(fd)
        raise
    return fd, True


class _BoundedRaw(io.RawIOBase):
    """The reads of `_read_up_to`, one buffer at a time."""

    def __init__(
        self, fd: int, limit: int, name: str, what: str, error: type[OomguardError], stream: bool
    ) -> None:
        super().__init__()
        self.fd, self.limit, self.name, self.what, self.error, self.stream = (
            fd,
            limit,
            name,
            what,
            error,
            stream,
        )
        self.size = 0
        self.last = time.monotonic()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while True:
            if self.stream:
                wait = max(0.0, STALL_S - (time.monotonic() - self.last))
                ready, _, _ = select.select([self.fd], [], [], wait)
                if not ready:
                    stalled = f"nothing arrived for {STALL_S:g} s (a FIFO without a writer?)"
                    raise self.error(f"{self.what} {self.name}: {stalled}")
            try:
                chunk = os.read(self.fd, min(len(buffer), self.limit + 1 - self.size))
            except BlockingIOError:
                continue
            except OSError as err:
                raise self.error(f"cannot read {self.what} {self.name}: {err.strerror or err}") from None
            self.last = time.monotonic()
            self.size += len(chunk)
            if self.size > self.limit:
                raise self.error(
                    f"{self.what} {self.name} is more than {_mib(self.limit)} (an endless stream?)"
                )
            buffer[: len(chunk)] = chunk
            return len(chunk)

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
        super().close()


def _mib(limit: int) -> str:
    return f"{limit / 2**20:g} MiB"


def _read_up_to(
    fd: int, limit: int, name: str, what: str, error: type[OomguardError], *, stream: bool
) -> bytes:
    chunks: list[bytes] = []
    size = 0
    last = time.monotonic()
    while True:
        if stream:
            ready, _, _ = select.select([fd], [], [], max(0.0, STALL_S - (time.monotonic() - last)))
            if not ready:
                raise error(f"{what} {name}: nothing arrived for {STALL_S:g} s (a FIFO without a writer?)")
        try:
            chunk = os.read(fd, min(CHUNK_BYTES, limit + 1 - size))
        except BlockingIOError:
            continue
        except OSError as err:
            raise error(f"cannot read {what} {name}: {err.strerror or err}") from None
        if not chunk:
            return b"".join(chunks)
        last = time.monotonic()
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise error(f"{what} {name} is more than {_mib(limit)} (an endless stream?)")


def read_text_bounded(
    path: str | os.PathLike[str], *, limit: int, what: str, error: type[OomguardError]
) -> str:
    """`read_bounded` decoded as UTF-8 (a BOM dropped)."""
    data = read_bounded(path, limit=limit, what=what, error=error)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise error(f"{what} {os.fspath(path)}:{line}: not valid UTF-8") from None


def loads_json(text: str | bytes, where: str, error: type[OomguardError]) -> Any:
    """JSON as plain data with finite, representable numbers; `error` naming `where` otherwise."""

    def constant(name: str) -> Any:
        raise error(f"{where}: {name} is not a finite number")

    def integer(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise error(f"{where}: the integer {digits[:12]}... ({len(digits)} digits) is out of range")
        return int(digits)

    def real(digits: str) -> float:
        number = float(digits)
        if not math.isfinite(number):
            raise error(f"{where}: {digits[:24]} is out of range")
        return number

    try:
        return json.loads(text, parse_constant=constant, parse_int=integer, parse_float=real)
    except RecursionError:
        raise error(f"{where}: JSON nested too deeply") from None
    except UnicodeDecodeError:
        raise error(f"{where}: not valid UTF-8") from None
    except json.JSONDecodeError as err:
        raise error(f"{where}: not valid JSON ({err.msg}, line {err.lineno})") from None
