"""One large log file read on every core: while the reader feeds chunk i to the parsers, worker processes
survey the chunks after it (gated.survey: the state-free scans that look at every byte).

The reader's answer is the same as reading alone: the chunks are line-aligned the same way, the surveys hold
exactly what the reader would have worked out itself, and the reader still feeds the lines in order. Used
for a regular file (the workers read their chunks from it themselves, so only offsets and small surveys
cross processes) when the machine has several cores and the process can fork safely; otherwise the file is
read as a stream.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor

from oomguard.diagnosis import scan
from oomguard.diagnosis.gated import ChunkSurvey, GatedReader, SurveyPlan, survey
from oomguard.diagnosis.scan import MAX_LINE, ReadStats, head_lines

# Below this size a file is read in the time it takes to start the workers.
MIN_BYTES = 64 << 20
# At most this many workers, whatever the core count (each holds one chunk).
MAX_WORKERS = 4
# Off inside the workers of a several-files read (each already has a core).
_enabled = True

# What a forked worker surveys with, inherited from the reading process (never pickled).
_plan: tuple[SurveyPlan, int] | None = None


def disable() -> None:
    global _enabled
    _enabled = False


def usable(size: int) -> bool:
    """Whether reading a file of `size` bytes this way can pay off here."""
    return (
        _enabled
        and size >= MIN_BYTES
        and (os.cpu_count() or 1) >= 2
        and "fork" in multiprocessing.get_all_start_methods()
        and threading.active_count() == 1  # forking a process with other threads can deadlock the child
    )


def chunk_bounds(fd: int, size: int) -> list[tuple[int, int]] | None:
    """(offset, length) of line-aligned chunks of about scan.CHUNK bytes; None when a chunk edge falls in a
    line longer than MAX_LINE (the stream reader cuts such lines, so it reads that file)."""
    bounds: list[tuple[int, int]] = []
    start = 0
    while start < size:
        end = min(start + scan.CHUNK, size)
        if end < size:
            width = min(MAX_LINE, end - start)
            window = _pread(fd, width, end - width)
            newline = window.rfind(b"\n")
            if newline < 0:
                return None
            end = end - width + newline + 1
        bounds.append((start, end - start))
        start = end
    return bounds


def read_on_cores(
    reader: GatedReader, fd: int, size: int, stats: ReadStats, on_chunk: Callable[[int], None]
) -> bool:
    """Read the file behind `fd` through `reader`; False (nothing read) when it cannot be read this way."""
    global _plan
    plan = reader.survey_plan()
    bounds = chunk_bounds(fd, size)
    if plan is None or bounds is None:
        return False
    _plan = (plan, fd)
    workers = min(MAX_WORKERS, os.cpu_count() or 1, len(bounds))
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    try:
        surveys = [pool.submit(_survey_at, offset, length) for offset, length in bounds]
        _feed_in_order(reader, fd, bounds, surveys, stats, on_chunk)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # an interrupted read leaves no survey running
        _plan = None
    return True


def _feed_in_order(
    reader: GatedReader,
    fd: int,
    bounds: list[tuple[int, int]],
    surveys: list[Future[ChunkSurvey]],
    stats: ReadStats,
    on_chunk: Callable[[int], None],
) -> None:
    """Each chunk to the reader with its survey and the next chunk's first lines as lookahead."""
    pending: tuple[bytes, Future[ChunkSurvey]] | None = None
    for (offset, length), surveyed in zip(bounds, surveys, strict=True):
        chunk = _pread(fd, length, offset)
        stats.bytes += len(chunk)
        if pending is not None:
            reader.read_chunk(pending[0], head_lines(chunk), stats, False, pending[1].result())
            on_chunk(stats.bytes)
        pending = (chunk, surveyed)
    if pending is not None:
        reader.read_chunk(pending[0], (), stats, True, pending[1].result())
        on_chunk(stats.bytes)


def _survey_at(offset: int, length: int) -> ChunkSurvey:
    """A worker's task: read the chunk from the shared file and survey it."""
    assert _plan is not None, "a survey worker runs only in a process forked by read_on_cores"
    plan, fd = _plan
    return survey(plan, _pread(fd, length, offset))


def _pread(fd: int, length: int, offset: int) -> bytes:
    """Exactly `length` bytes at `offset` (fewer only at the end of the file)."""
    parts: list[bytes] = []
    while length > 0:
        part = os.pread(fd, length, offset)
        if not part:
            break
        parts.append(part)
        length -= len(part)
        offset += len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)
