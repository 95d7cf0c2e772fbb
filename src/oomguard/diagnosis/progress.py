"""Progress of reading a large input, on stderr, only when stderr is a terminal (never in pipes, logs or
CI)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

# Inputs smaller than this read in a few seconds at most: no progress line.
MIN_BYTES = 100 << 20
# At most this often.
INTERVAL_S = 0.5
# Off in worker processes of a parallel read (their lines would overwrite each other).
_enabled = True


def disable() -> None:
    global _enabled
    _enabled = False


class Progress:
    """`p = Progress(name, size)`, `p.update(bytes_read)` as it goes, `p.close()` at the end; `size` is None
    when
    unknown (pipes, compressed inputs)."""

    def __init__(self, name: str, size: int | None, stream: TextIO | None = None) -> None:
        self.name = name
        self.size = size
        self.stream = stream if stream is not None else sys.stderr
        self.active = _enabled and self.stream.isatty() and (size is None or size >= MIN_BYTES)
        self.start = self.last = time.monotonic()
        self.shown = False

    def update(self, done: int) -> None:
        now = time.monotonic()
        if not self.active or now - self.last < INTERVAL_S or (self.size is None and done < MIN_BYTES):
            return
        self.last = now
        rate = done / max(now - self.start, 1e-9) / 1e6
        share = f" ({done / self.size:.0%})" if self.size else ""
        self.stream.write(f"\rreading {self.name}: {done / 1e6:,.0f} MB{share}, {rate:,.0f} MB/s ")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        """Clear the line, so that the report starts on a clean one."""
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
