"""Evidence inputs: files, directories (walked), archives (tar, tar.gz, tar.zst, zip; members read in memory
or streamed, never written to disk, so a hostile member name cannot escape anywhere), gzip'd, zstd'd, bzip2'd
and xz'd logs (decompressed as they stream) and stdin. Text framed otherwise than UTF-8 lines (UTF-16, CR-only
line endings, Docker's json-file records) is unframed as it streams (framing.py).

Yields `(name, stream)` pairs; each stream must be consumed before the next pair is taken (tar from stdin is
read as a stream). Anything that cannot be read is recorded in `skipped` with the reason, and reading goes on.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, BinaryIO, cast

import zstandard

from oomguard.diagnosis.framing import HEAD_BYTES, unframed
from oomguard.errors import InputFormatError

# Archives inside archives are opened up to this depth (a tarball of a support bundle of tarballs).
MAX_ARCHIVE_DEPTH = 3
# Files we never read while walking a directory: they cannot hold evidence and some are huge.
SKIP_SUFFIXES = (".safetensors", ".bin.index", ".pt", ".pth", ".gguf", ".so", ".pyc", ".png", ".jpg", ".jpeg")
# A zip on stdin must be buffered (zip needs seeking); this bounds that buffer.
MAX_STDIN_ZIP = 512 << 20

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
ZIP_MAGIC = b"PK\x03\x04"
BZ2_MAGIC = b"BZh"
XZ_MAGIC = b"\xfd7zXZ\x00"
# What a corrupt compressed stream raises as it is read.
CORRUPT = (OSError, EOFError, zstandard.ZstdError)


class _Zstd(io.RawIOBase):
    """A zstd stream decompressed as it is read; corrupt data reads as an OSError, as a corrupt gzip does."""

    def __init__(self, stream: BinaryIO) -> None:
        self._reader = zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            return int(self._reader.readinto(buffer))
        except zstandard.ZstdError as err:
            raise OSError(str(err)) from err


class _Xz(io.RawIOBase):
    """An xz stream decompressed as it is read; corrupt data reads as an OSError, as a corrupt gzip does."""

    def __init__(self, stream: BinaryIO) -> None:
        self._file = lzma.LZMAFile(stream)  # noqa: SIM115 - closed with the stream it reads

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            return self._file.readinto(buffer)
        except lzma.LZMAError as err:
            raise OSError(str(err)) from err


def _is_tar(head: bytes) -> bool:
    return len(head) > 262 and head[257:262] == b"ustar"


def iter_inputs(
    paths: list[str], skipped: list[str], stdin: BinaryIO | None = None
) -> Iterator[tuple[str, BinaryIO]]:
    """Every readable evidence stream under `paths` ('-' is stdin), in a stable order."""
    if not paths:
        raise InputFormatError("no evidence given: pass log files, directories, archives, or '-' for stdin")
    for raw in paths:
        if raw == "-":
            yield from _from_stream("<stdin>", stdin if stdin is not None else sys.stdin.buffer, skipped, 0)
            continue
        path = Path(raw)
        if path.is_dir():
            yield from _walk(path, skipped)
        elif path.is_file():
            yield from _from_file(path, str(path), skipped)
        elif not path.exists():
            raise InputFormatError(f"{raw}: no such file or directory")
        else:
            skipped.append(f"{raw}: not a regular file")


def plain_files(paths: list[str]) -> list[tuple[str, str]] | None:
    """The files `iter_inputs(paths)` would open, in its order, as ("file", path), with the notes of what the
    walk skips in between as ("note", text); None when a path is stdin or neither a file nor a directory (the
    sequential reader then says what is wrong)."""
    planned: list[tuple[str, str]] = []
    for raw in paths:
        path = Path(raw)
        if raw == "-" or not (path.is_dir() or path.is_file()):
            return None
        if path.is_file():
            planned.append(("file", raw))
            continue
        notes: list[str] = []
        for found in _walk_paths(path, notes):
            planned += [("note", n) for n in notes] + [("file", str(found))]
            notes.clear()
        planned += [("note", n) for n in notes]
    return planned


def _walk_paths(root: Path, skipped: list[str]) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if name.endswith(SKIP_SUFFIXES):
                skipped.append(f"{path}: model or binary artefact, not evidence")
                continue
            if path.is_symlink() or not path.is_file():
                skipped.append(f"{path}: not a regular file")
                continue
            yield path


def _walk(root: Path, skipped: list[str]) -> Iterator[tuple[str, BinaryIO]]:
    for path in _walk_paths(root, skipped):
        yield from _from_file(path, str(path), skipped)


def _from_file(path: Path, name: str, skipped: list[str]) -> Iterator[tuple[str, BinaryIO]]:
    with ExitStack() as stack:
        try:
            handle = stack.enter_context(open(path, "rb"))
        except OSError as err:
            skipped.append(f"{name}: cannot open ({err.strerror or err})")
            return
        yield from _from_stream(name, handle, skipped, 0)


def _peekable(stream: BinaryIO) -> BinaryIO:
    """The stream itself when it can peek (files, gzip, buffered tar members), else a buffered view of it."""
    if hasattr(stream, "peek"):
        return stream
    return cast(BinaryIO, io.BufferedReader(cast(io.RawIOBase, stream)))


def _peek(stream: BinaryIO, size: int) -> bytes:
    data: bytes = getattr(stream, "peek")(size)  # noqa: B009 - BinaryIO does not declare peek
    return data[:size]


def _from_stream(
    name: str, stream: BinaryIO, skipped: list[str], depth: int
) -> Iterator[tuple[str, BinaryIO]]:
    buffered = _peekable(stream)
    head = _peek(buffered, 512)
    if depth < MAX_ARCHIVE_DEPTH and head.startswith(ZSTD_MAGIC):
        inner = cast(BinaryIO, io.BufferedReader(_Zstd(buffered), 1 << 20))
        yield from _from_compressed(name, ".zst", inner, skipped, depth)
    elif depth < MAX_ARCHIVE_DEPTH and (head.startswith(GZIP_MAGIC) or _is_tar(head)):
        yield from _from_tar_or_gzip(name, buffered, head, skipped, depth)
    elif depth < MAX_ARCHIVE_DEPTH and head.startswith(ZIP_MAGIC):
        yield from _from_zip(name, buffered, skipped, depth)
    elif depth < MAX_ARCHIVE_DEPTH and head.startswith(BZ2_MAGIC) and _is_bz2(head):
        yield from _from_compressed(name, ".bz2", cast(BinaryIO, bz2.BZ2File(buffered)), skipped, depth)
    elif depth < MAX_ARCHIVE_DEPTH and head.startswith(XZ_MAGIC):
        inner = cast(BinaryIO, io.BufferedReader(_Xz(buffered), 1 << 20))
        yield from _from_compressed(name, ".xz", inner, skipped, depth)
    else:
        # UTF-16, CR-only line endings, Docker's json-file records: undone here, so every reader sees the
        # same UTF-8 lines whatever the framing
        text, _ = unframed(buffered, _peek(buffered, HEAD_BYTES))
        yield name, text


def _is_bz2(head: bytes) -> bool:
    """'BZh', a block size digit, then the block magic (pi's digits): not a log line that starts with BZh."""
    return len(head) >= 10 and head[3:4].isdigit() and head[4:10] == b"\x31\x41\x59\x26\x53\x59"


def _from_tar_or_gzip(
    name: str, stream: BinaryIO, head: bytes, skipped: list[str], depth: int
) -> Iterator[tuple[str, BinaryIO]]:
    if head.startswith(GZIP_MAGIC):
        yield from _from_compressed(
            name, ".gz", cast(BinaryIO, gzip.GzipFile(fileobj=stream, mode="rb")), skipped, depth
        )
        return
    yield from _from_tar(name, stream, skipped, depth)


def _from_compressed(
    name: str, suffix: str, inner: BinaryIO, skipped: list[str], depth: int
) -> Iterator[tuple[str, BinaryIO]]:
    """The decompressed stream of a .gz / .zst: a tar archive, or one document (read as it streams)."""
    try:
        inner_head = _peek(inner, 512)
    except CORRUPT as err:
        skipped.append(f"{name}: corrupt {suffix[1:]} data ({err})")
        return
    if _is_tar(inner_head):
        yield from _from_tar(name, inner, skipped, depth)
    else:
        yield from _guard(name, _from_stream(name.removesuffix(suffix), inner, skipped, depth + 1), skipped)


def _from_tar(name: str, stream: BinaryIO, skipped: list[str], depth: int) -> Iterator[tuple[str, BinaryIO]]:
    with ExitStack() as stack:
        try:
            archive = stack.enter_context(tarfile.open(fileobj=stream, mode="r|"))
        except tarfile.TarError as err:
            skipped.append(f"{name}: not a readable tar archive ({err})")
            return
        try:
            for member in archive:
                label = f"{name}!{member.name}"
                if not member.isfile():
                    continue  # directories, links, devices: nothing to read, nothing extracted
                fileobj = archive.extractfile(member)
                if fileobj is None:
                    continue
                yield from _guard(label, _from_stream(label, fileobj, skipped, depth + 1), skipped)  # type: ignore[arg-type]
        except (tarfile.TarError, *CORRUPT) as err:
            skipped.append(f"{name}: archive truncated or corrupt after the members read so far ({err})")


def _from_zip(name: str, stream: BinaryIO, skipped: list[str], depth: int) -> Iterator[tuple[str, BinaryIO]]:
    seekable: BinaryIO = stream
    if not stream.seekable():
        data = stream.read(MAX_STDIN_ZIP + 1)
        if len(data) > MAX_STDIN_ZIP:
            skipped.append(f"{name}: zip on a pipe larger than {MAX_STDIN_ZIP >> 20} MiB; pass it as a file")
            return
        seekable = io.BytesIO(data)
    try:
        archive = zipfile.ZipFile(seekable)
    except (zipfile.BadZipFile, OSError) as err:
        skipped.append(f"{name}: not a readable zip archive ({err})")
        return
    with archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            label = f"{name}!{info.filename}"
            try:
                with archive.open(info) as member:
                    yield from _guard(label, _from_stream(label, member, skipped, depth + 1), skipped)  # type: ignore[arg-type]
            except (zipfile.BadZipFile, OSError, RuntimeError, NotImplementedError) as err:
                skipped.append(f"{label}: cannot read member ({err})")


def _guard(
    name: str, inner: Iterator[tuple[str, BinaryIO]], skipped: list[str]
) -> Iterator[tuple[str, BinaryIO]]:
    """Nested readers may fail mid-way (truncated gzip): record it and go on with the next input."""
    try:
        yield from inner
    except (zipfile.BadZipFile, tarfile.TarError, *CORRUPT) as err:
        skipped.append(f"{name}: truncated or corrupt ({err})")
