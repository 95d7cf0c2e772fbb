"""Evidence in, facts out: every input is detected and handed to its reader; what cannot be read is said.

Small text documents go line by line through every line parser (and the prose reader); large ones through
the gated reader (gated.py), which hands the parsers only the lines holding their declared triggers. Pickles
go to the restricted snapshot reader, Prometheus scrapes to the
metrics parser, cgroup files to the cgroup reader.
"""

from __future__ import annotations

import enum
import io
import os
import stat
from concurrent.futures import ProcessPoolExecutor
from types import ModuleType
from typing import BinaryIO

from oomguard.diagnosis import detect, engine_marks, gated, parallel_read, progress, scan
from oomguard.diagnosis.evidence import Document, Evidence
from oomguard.diagnosis.inputs import iter_inputs, plain_files
from oomguard.diagnosis.sources import (
    accelerator_smi,
    allocation_caps,
    cgroup,
    device_errors,
    exllama,
    free,
    gpu_faults,
    int32_limits,
    kernel_oom,
    kubectl,
    kv_offload,
    llama_cpp,
    metal,
    metrics,
    misreported,
    mlc_llm,
    nvidia_smi,
    ollama,
    prose,
    ps,
    rank_kv,
    request_options,
    rust_backtrace,
    setting,
    sglang_log,
    tensorrt_llm,
    tgi,
    torch_snapshot,
    traceback,
    tt_metal,
    vllm_log,
    vllm_platforms,
    xla,
    xpu,
)
from oomguard.diagnosis.sources.base import Context, LineParser
from oomguard.errors import InputFormatError
from oomguard.watch.metrics import MAX_ENGINES_PER_TARGET

LINE_SOURCES: tuple[ModuleType, ...] = (
    vllm_log,
    sglang_log,
    traceback,
    int32_limits,
    gpu_faults,
    device_errors,
    nvidia_smi,
    accelerator_smi,
    kernel_oom,
    cgroup,
    kubectl,
    free,
    ps,
    llama_cpp,
    ollama,
    tensorrt_llm,
    tgi,
    exllama,
    metal,
    vllm_platforms,
    xla,
    xpu,
    allocation_caps,
    misreported,
    kv_offload,
    tt_metal,
    rank_kv,
    request_options,
    mlc_llm,
    rust_backtrace,
)
# Several files together at least this large are read by a process per core (each file's reading is bounded).
PARALLEL_MIN_BYTES = 64 << 20
# Whole-document formats are read into memory up to this size (snapshots of big nodes run to hundreds of MB).
MAX_WHOLE_DOCUMENT = 1 << 30


class Reading(enum.Enum):
    """How a text document's lines reach the parsers."""

    AUTO = "auto"  # small documents: every line, prose included; large ones: gated
    GATED = "gated"  # only the lines holding a parser's trigger (the fast path), whatever the size; no prose
    EVERY_LINE = "every-line"  # every line to every line parser (the reference the fast path must equal); no
    #                            prose beyond small documents


def read_evidence(paths: list[str], stdin: BinaryIO | None = None, how: Reading = Reading.AUTO) -> Evidence:
    evidence = Evidence()
    skipped: list[str] = []
    planned = plain_files(paths)
    if planned is not None and _worth_parallel(planned):
        _read_parallel(planned, how, evidence, skipped)
    else:
        for name, stream in iter_inputs(paths, skipped, stdin):
            evidence.documents.append(read_one(name, stream, evidence, how))
    evidence.skipped.extend(skipped)
    for doc in evidence.documents:
        evidence.skipped.extend(f"{doc.name}: {note}" for note in doc.skipped)
    return evidence


def _worth_parallel(planned: list[tuple[str, str]]) -> bool:
    """Two or more files, large enough together to repay starting a process per core."""
    files = [path for kind, path in planned if kind == "file"]
    if len(files) < 2 or (os.cpu_count() or 1) < 2:
        return False
    return sum(os.path.getsize(path) for path in files) >= PARALLEL_MIN_BYTES


def _worker_start() -> None:
    """A worker of a several-files read: no progress lines, no further processes."""
    progress.disable()
    parallel_read.disable()


def _read_parallel(
    planned: list[tuple[str, str]], how: Reading, evidence: Evidence, skipped: list[str]
) -> None:
    """One file per task on a process per core; the parts are merged in the sequential order (facts,
    documents,
    notes), so the evidence is the sequential read's."""
    files = [path for kind, path in planned if kind == "file"]
    workers = min(len(files), os.cpu_count() or 1)
    with ProcessPoolExecutor(max_workers=workers, initializer=_worker_start) as pool:
        parts = iter(pool.map(_read_file, files, [how] * len(files)))
        for kind, value in planned:
            if kind == "note":
                skipped.append(value)
                continue
            notes, part = next(parts)
            skipped += notes
            evidence.absorb(part)


def _read_file(path: str, how: Reading) -> tuple[list[str], Evidence]:
    """One file's evidence and the notes on what of it could not be opened (a worker's task)."""
    evidence = Evidence()
    notes: list[str] = []
    for name, stream in iter_inputs([path], notes):
        evidence.documents.append(read_one(name, stream, evidence, how))
    return notes, evidence


def read_one(name: str, stream: BinaryIO, evidence: Evidence, how: Reading = Reading.AUTO) -> Document:
    first, complete, error = scan.read_all(stream, scan.SMALL_DOCUMENT)
    kind = detect.detect(name, first[:65536])
    doc = Document(name=name, kind=kind, bytes=len(first))
    if error:
        doc.skipped.append(f"read stopped early ({error}); used what came before")
    if kind == detect.KIND_EMPTY:
        doc.skipped.append("empty")
        return doc
    if kind == detect.KIND_BINARY:
        doc.skipped.append("binary data, not a log, a scrape or a snapshot: skipped")
        return doc
    if kind == detect.KIND_METRICS:
        _read_metrics(name, first, stream, evidence, doc)
        return doc
    if kind in (detect.KIND_PICKLE, detect.KIND_CGROUP):
        data = first
        if not complete:
            rest, _, err = scan.read_all(stream, MAX_WHOLE_DOCUMENT - len(first))
            data += rest
            if err:
                doc.skipped.append(f"read stopped early ({err})")
        doc.bytes = len(data)
        before = len(evidence)
        if kind == detect.KIND_PICKLE:
            try:
                torch_snapshot.read_document(name, data, evidence)
            except torch_snapshot.RefusedPickle as err:
                doc.skipped.append(f"pickle not read: {err}")
        else:
            cgroup.read_document(name, detect.base_name(name), data, evidence)
        doc.facts = len(evidence) - before
        doc.lines = data.count(b"\n")
        return doc
    _read_text(name, first, complete, stream, evidence, doc, how)
    return doc


def _read_metrics(name: str, first: bytes, stream: BinaryIO, evidence: Evidence, doc: Document) -> None:
    """A scrape file streamed in line-aligned chunks (a file of appended scrapes can be gigabytes)."""
    stats = scan.ReadStats()
    read = metrics.read_document(name, scan.iter_chunks(first, stream, stats), evidence)
    if stats.truncated:
        doc.skipped.append(f"read stopped early ({stats.truncated})")
    if read.bad:
        doc.skipped.append(f"{read.bad} unparsable metrics line(s) skipped (first: {read.first_bad})")
    if read.dropped_engines:
        doc.skipped.append(
            f"{read.dropped_engines} sample(s) of engines past the first {MAX_ENGINES_PER_TARGET} "
            "of a scrape ignored"
        )
    doc.bytes, doc.lines, doc.facts = stats.bytes, read.lines, read.facts


def _read_text(
    name: str, first: bytes, complete: bool, stream: BinaryIO, evidence: Evidence, doc: Document, how: Reading
) -> None:
    head = first[: engine_marks.HEAD_BYTES]
    evidence.engine_marks.update(engine_marks.count_marks(head))
    evidence.add_head(name, head.decode("utf-8", "replace"))
    ctx = Context(name, evidence)
    parsers: list[LineParser] = [m.Parser(ctx) for m in LINE_SOURCES]
    stats = scan.ReadStats()

    if complete and how is Reading.AUTO:
        # The reporter's words, and the setup a pasted report states (after prose: it emits only beside
        # what the other readers found).
        parsers += [prose.Parser(ctx), setting.Parser(ctx)]
        stats.bytes = len(first)
        for line in scan.lines_of_small(first, stats):
            gated.feed_line(ctx, parsers, line)
    elif how is Reading.EVERY_LINE:
        for line in scan.lines_of_chunks(scan.iter_chunks(first, stream, stats), stats):
            gated.feed_line(ctx, parsers, line)
    else:
        reader = gated.GatedReader(ctx, parsers)
        regular = _regular_file(stream)
        shown = progress.Progress(name, regular[1] if regular else None)
        try:
            if not (
                regular is not None
                and parallel_read.usable(regular[1])
                and parallel_read.read_on_cores(reader, *regular, stats, shown.update)
            ):
                gated.read_gated(reader, scan.iter_chunks(first, stream, stats), stats, shown.update)
        finally:
            shown.close()
    for parser in parsers:
        parser.finish()
    doc.lines, doc.bytes, doc.facts = stats.lines, stats.bytes, ctx.facts
    doc.skipped.extend(ctx.skipped)
    if stats.truncated:
        doc.skipped.append(f"read stopped early ({stats.truncated}); used the lines before it")
    if stats.bad_utf8_lines:
        doc.skipped.append(
            f"{stats.bad_utf8_lines} line(s) with invalid UTF-8 (bad bytes replaced, lines kept)"
        )
    if stats.cut_lines:
        doc.skipped.append(
            f"{stats.cut_lines} line(s) longer than {scan.MAX_LINE >> 10} KiB cut to their start"
        )
    if ctx.facts == 0:
        doc.skipped.append(
            "nothing recognised (not a vLLM/SGLang/llama.cpp/TGI/TensorRT-LLM log, traceback, nvidia-smi, "
            "dmesg, kubectl, cgroup or free output)"
        )


def _regular_file(stream: BinaryIO) -> tuple[int, int] | None:
    """The descriptor and size of a regular file behind `stream` (for progress and the read on several
    cores), None for pipes, archives and compressed data."""
    raw = getattr(stream, "raw", None)
    if not isinstance(raw, io.FileIO):
        return None
    try:
        fd = raw.fileno()
        info = os.fstat(fd)
    except (OSError, ValueError):
        return None
    return (fd, info.st_size) if stat.S_ISREG(info.st_mode) else None


def require_evidence(evidence: Evidence) -> None:
    """No fact at all from any input is a user error: say what was read."""
    if len(evidence) == 0:
        if not evidence.documents:
            raise InputFormatError("no readable input (" + "; ".join(evidence.skipped[:3]) + ")")
        names = ", ".join(f"{d.name} ({d.kind}{_why_unread(d)})" for d in evidence.documents[:3])
        raise InputFormatError(
            f"no OOM evidence recognised in {names}: expected vLLM/SGLang/llama.cpp/TGI/TensorRT-LLM logs, "
            "tracebacks, nvidia-smi, dmesg, kubectl, cgroup, free, /metrics or a torch memory snapshot"
        )


def _why_unread(doc: Document) -> str:
    """Why a whole-document input gave nothing (a refused pickle names its opcode), for the one-line error."""
    if doc.kind in (detect.KIND_PICKLE, detect.KIND_BINARY) and doc.skipped:
        return f": {doc.skipped[0]}"
    return ""
