"""Compressed logs (.gz, .zst, .tar.zst) read as they stream give the plain log's evidence; corrupt ones say
so;
several files read in parallel give the sequential read's evidence."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest
import zstandard

from oomguard.diagnosis import read
from oomguard.diagnosis.evidence import Evidence, LoadSample, OomMessage
from oomguard.diagnosis.read import read_evidence

LOG = b"".join(
    [
        b"INFO 11-29 07:00:01 [api_server.py:1880] vLLM API server version 0.33.0\n",
        b"(EngineCore pid=120) INFO 11-29 07:00:30 [gpu_worker.py:508] Available KV cache memory: 55.1 GiB\n",
        *(
            b"(APIServer pid=1) INFO 11-29 08:00:00 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 "
            b"tokens/s, Avg generation throughput: 2.0 tokens/s, Running: %d reqs, Waiting: 0 reqs, GPU KV "
            b"cache "
            b"usage: 12.5%%, Prefix cache hit rate: 0.0%%\n" % (i % 64)
            for i in range(40_000)
        ),
        (
            b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 0 has a total "
            b"capacity of "
            b"79.19 GiB of which 1.21 GiB is free.\n"
        ),
    ]
)


def _facts(evidence: Evidence) -> list[tuple[str, int, str]]:
    return [(type(f).__name__, f.where.line, f.text) for f in evidence]


def test_gz_zst_and_tar_zst_read_as_the_plain_log(tmp_path: Path) -> None:
    assert len(LOG) > 8 << 20  # large: the gated reader, fed as the stream decompresses
    plain = tmp_path / "server.log"
    plain.write_bytes(LOG)
    (tmp_path / "server.log.gz").write_bytes(gzip.compress(LOG, 1))
    (tmp_path / "server.log.zst").write_bytes(zstandard.ZstdCompressor(level=1).compress(LOG))
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as archive:
        info = tarfile.TarInfo("logs/server.log")
        info.size = len(LOG)
        archive.addfile(info, io.BytesIO(LOG))
    (tmp_path / "bundle.tar.zst").write_bytes(zstandard.ZstdCompressor(level=1).compress(tar.getvalue()))
    expected = _facts(read_evidence([str(plain)]))
    assert any(kind == "OomMessage" for kind, _, _ in expected)
    for name in ("server.log.gz", "server.log.zst", "bundle.tar.zst"):
        evidence = read_evidence([str(tmp_path / name)])
        assert _facts(evidence) == expected, name
        assert evidence.documents[0].lines == LOG.count(b"\n")
    assert read_evidence([str(tmp_path / "bundle.tar.zst")]).documents[0].name.endswith("!logs/server.log")


def test_corrupt_zst_in_the_middle_keeps_what_came_before_and_says_so(tmp_path: Path) -> None:
    data = bytearray(zstandard.ZstdCompressor(level=1).compress(LOG))
    data[len(data) // 2 : len(data) // 2 + 4096] = bytes(4096)
    path = tmp_path / "server.log.zst"
    path.write_bytes(bytes(data))
    evidence = read_evidence([str(path)])
    assert 0 < evidence.documents[0].lines < LOG.count(b"\n")
    assert any("read stopped early" in note and "zstd" in note for note in evidence.skipped)


def test_several_files_read_in_parallel_give_the_sequential_evidence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ranks = tmp_path / "ranks"
    (ranks / "sub").mkdir(parents=True)
    for rank in range(3):
        (ranks / f"rank{rank}.log").write_bytes(LOG.replace(b"Running: 1 ", b"Running: %d " % (100 + rank)))
    (ranks / "model.safetensors").write_bytes(b"\0" * 64)  # skipped by the walk, with a note
    (ranks / "sub" / "rank3.log.zst").write_bytes(zstandard.ZstdCompressor(level=1).compress(LOG[:4000]))
    (ranks / "sub" / "broken.log.gz").write_bytes(b"\x1f\x8b" + b"junk" * 10)
    paths = [str(ranks), str(tmp_path / "ranks" / "rank0.log")]
    sequential = read_evidence(paths)
    monkeypatch.setattr(read, "PARALLEL_MIN_BYTES", 0)
    parallel = read_evidence(paths)
    assert [(f, f.where.time) for f in parallel] == [(f, f.where.time) for f in sequential]
    assert [parallel.count(kind) for kind in (LoadSample, OomMessage)] == [
        sequential.count(kind) for kind in (LoadSample, OomMessage)
    ]
    assert parallel.documents == sequential.documents and len(parallel.documents) == 5
    assert parallel.skipped == sequential.skipped and len(parallel.skipped) >= 2
