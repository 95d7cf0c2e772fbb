"""The fast (gated) reader and the full read agree: same facts at the same lines, same counts, same diagnosis,
on every real report (dev set, OOM corpus, the texts in these tests) and on generated logs that exercise the
chunk edges, the stats series counted in bulk, blocks, bad UTF-8 and long lines.

A parser that gains a line format without declaring its trigger (sources/triggers.py) fails here."""

from __future__ import annotations

import ast
import io
import json
import random
from pathlib import Path
from typing import Any

import pytest

from oomguard.diagnosis import gated, parallel_read, scan
from oomguard.diagnosis.diagnosis import diagnose
from oomguard.diagnosis.evidence import Evidence, GpuProcess, LoadSample
from oomguard.diagnosis.read import LINE_SOURCES, Reading, read_one
from oomguard.diagnosis.render import render_json

ROOT = Path(__file__).resolve().parents[2]


def _read(text: bytes, how: Reading) -> tuple[Evidence, Any]:
    evidence = Evidence()
    evidence.documents.append(read_one("doc.log", io.BytesIO(text), evidence, how))
    return evidence, evidence.documents[0]


def assert_same_reading(text: bytes) -> Evidence:
    full, full_doc = _read(text, Reading.EVERY_LINE)
    fast, fast_doc = _read(text, Reading.GATED)
    assert list(fast) == list(full)
    assert [(f.where, f.where.time) for f in fast] == [(f.where, f.where.time) for f in full]
    assert len(fast) == len(full)
    assert fast.count(LoadSample) == full.count(LoadSample)
    assert fast_doc == full_doc
    if len(full):
        assert render_json(diagnose(fast)) == render_json(diagnose(full))
    return full


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _corpus(shared_data: Path) -> list[tuple[str, str]]:
    texts = [(r["id"], r["evidence"]) for r in _rows(shared_data / "validation" / "oom_reports_dev.jsonl")]
    for path in sorted((ROOT / "bench" / "data" / "oom_corpus").glob("*.jsonl")):
        texts += [(r["id"], r["evidence"]) for r in _rows(path) if isinstance(r.get("evidence"), str)]
    # Every multi-line text written in the diagnosis tests (this folder).
    written = [
        (f"{module.stem}:{node.lineno}", node.value)
        for module in sorted(Path(__file__).parent.glob("test_*.py"))
        for node in ast.walk(ast.parse(module.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.count("\n") >= 2
    ]
    assert len(written) >= 100, "the tests' own texts were not found"
    return texts + written


@pytest.mark.parametrize("use_hyperscan", [True, False], ids=["hyperscan", "regex"])
def test_gated_reading_equals_the_full_read_on_every_real_report(
    shared_data: Path, use_hyperscan: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not use_hyperscan:
        monkeypatch.setattr(gated, "hyperscan", None)
    texts = _corpus(shared_data)
    assert len(texts) >= 39
    for _, text in texts:
        assert_same_reading(text.encode())


def test_every_line_parser_declares_its_triggers() -> None:
    for module in LINE_SOURCES:
        triggers = module.Parser.TRIGGERS
        assert triggers.words or triggers.caseless, module.__name__


STATS = (
    "(APIServer pid=1) INFO 11-29 08:{m:02d}:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: "
    "{p:.1f} tokens/s, Avg generation throughput: {g:.1f} tokens/s, Running: {r} reqs, Waiting: {w} reqs, "
    "GPU KV cache usage: {u:.1f}%, Prefix cache hit rate: 12.0%"
)
ACCESS = '(APIServer pid=1) INFO:     10.0.0.{i}:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
NVIDIA = """+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |
| N/A   35C    P0            115W /  700W |   79000MiB /  81559MiB |      0%      Default |
+-----------------------------------------+------------------------+----------------------+

+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |
|=========================================================================================|
|    0   N/A  N/A      1234      C   python3                                     78000MiB |
+-----------------------------------------------------------------------------------------+"""
OOM = (
    "(EngineCore pid=120) ERROR 11-29 09:59:59 [core.py:935] torch.OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 3.50 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.21 GiB is free."
)


def _log(rng: random.Random, lines: int, extras: dict[int, str]) -> bytes:
    out = [
        "INFO 11-29 07:00:01 [api_server.py:1880] vLLM API server version 0.33.0",
        "(APIServer pid=1) INFO 11-29 07:00:02 [launcher.py:44] Application startup complete.",
    ]
    for i in range(lines):
        if i in extras:
            out.append(extras[i])
        elif rng.random() < 0.4:
            out.append(
                STATS.format(
                    m=i // 60 % 60,
                    s=i % 60,
                    p=rng.uniform(0, 900),
                    g=rng.uniform(0, 90),
                    r=rng.randrange(64),
                    w=rng.randrange(4),
                    u=rng.uniform(0, 99),
                )
            )
        else:
            out.append(ACCESS.format(i=i % 250))
    return ("\n".join(out) + "\n").encode()


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 64 KiB so that a test log of a few MB crosses many chunk edges and series windows."""
    monkeypatch.setattr(scan, "CHUNK", 64 << 10)


@pytest.mark.usefixtures("small_chunks")
def test_a_long_server_log_with_failures_blocks_and_odd_lines_reads_the_same() -> None:
    rng = random.Random(3)
    v0 = (
        "INFO 11-29 08:00:00 metrics.py:455] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
        "1.0 tokens/s, Running: 3 reqs, Swapped: 0 reqs, Pending: 1 reqs, GPU KV cache usage: 97.5%, CPU KV "
        "cache usage: 0.0%."
    )
    extras = {
        700: OOM,
        701: '  File "/usr/lib/python3.12/site-packages/vllm/worker.py", line 12, in execute_model',
        702: "    output = self.model_runner.execute_model(",
        1500: NVIDIA,
        2600: v0,
        2601: v0 + " " + v0,  # two stats lines run together: one sample
        2602: "Running: 5 reqs, nothing else",  # the marker outside a stats line
        4000: "x" * (300 << 10),  # a line longer than MAX_LINE
        5200: "caf\xe9 \udcff".encode("utf-8", "surrogateescape").decode("latin-1"),
        9000: "vllm-1  | INFO 11-29 09:00:00 [core.py:1] Available KV cache memory: 12.5 GiB",
        12000: "Killed",
        19990: OOM,
    }
    text = _log(rng, 20000, extras)
    text = text.replace("caf\xe9 \udcff".encode("latin-1", "replace"), b"caf\xc3\xa9 \xff")
    evidence = assert_same_reading(text)
    assert evidence.count(LoadSample) > 6000  # the series was counted, far more than the store keeps


@pytest.mark.usefixtures("small_chunks")
def test_stats_before_the_first_serving_marker_and_a_log_without_newline_at_the_end() -> None:
    rng = random.Random(5)
    text = _log(rng, 3000, {}).replace(b"Application startup complete.", b"starting")
    assert_same_reading(text.rstrip(b"\n"))
    assert_same_reading(text[: len(text) // 2])


@pytest.mark.usefixtures("small_chunks")
def test_crlf_lines_and_empty_lines_read_the_same() -> None:
    text = _log(random.Random(9), 2000, {500: "", 501: "", 502: OOM}).replace(b"\n", b"\r\n")
    assert_same_reading(text)


@pytest.mark.usefixtures("small_chunks")
def test_nvidia_smi_tables_across_chunk_edges_read_the_same() -> None:
    """Tables every 37 lines, so that chunk edges cut some: the table parser, busy in a block, sees the next
    chunk's first lines (the blank separator and the line that ends a table hold no trigger)."""
    rng = random.Random(11)
    extras = {i: NVIDIA + "\nsome unrelated line" for i in range(40, 6000, 37)}
    evidence = assert_same_reading(_log(rng, 6000, extras))
    assert evidence.count(GpuProcess) > 100


def _read_file(path: Path, how: Reading) -> tuple[Evidence, Any]:
    evidence = Evidence()
    with path.open("rb") as stream:
        evidence.documents.append(read_one(path.name, stream, evidence, how))
    return evidence, evidence.documents[0]


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("start", ["first chunk", "later chunk", "never"])
def test_a_file_read_on_several_cores_reads_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: str
) -> None:
    """The surveys worked out ahead in worker processes give the sequential read's facts, line numbers and
    counts, whether the stats series starts in the first chunk, in a later one, or never."""
    monkeypatch.setattr(parallel_read, "MIN_BYTES", 0)
    used: list[bool] = []
    real = parallel_read.read_on_cores

    def recorded(*args: Any) -> bool:
        used.append(real(*args))
        return used[-1]

    monkeypatch.setattr(parallel_read, "read_on_cores", recorded)
    extras = {700: OOM, 1500: NVIDIA, 9000: "Killed", 11990: OOM}
    text = _log(random.Random(21), 12000, extras)
    if start == "later chunk":
        text = text[: len(text) // 3].replace(b"Running:", b"Runn1ng:") + text[len(text) // 3 :]
    elif start == "never":
        text = text.replace(b"Running:", b"Runn1ng:")
    path = tmp_path / "server.log"
    path.write_bytes(text)
    full, full_doc = _read_file(path, Reading.EVERY_LINE)
    fast, fast_doc = _read_file(path, Reading.GATED)
    assert used == [True]
    assert [(f.where, f.where.time) for f in fast] == [(f.where, f.where.time) for f in full]
    assert fast.count(LoadSample) == full.count(LoadSample)
    assert fast_doc == full_doc
    assert render_json(diagnose(fast)) == render_json(diagnose(full))


@pytest.mark.usefixtures("small_chunks")
def test_a_chunk_edge_inside_an_overlong_line_falls_back_to_the_stream_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parallel_read, "MIN_BYTES", 0)
    text = _log(random.Random(4), 3000, {2000: "y" * (scan.MAX_LINE + (200 << 10)), 2900: OOM})
    path = tmp_path / "server.log"
    path.write_bytes(text)
    with path.open("rb") as stream:
        assert parallel_read.chunk_bounds(stream.fileno(), len(text)) is None
    full, _ = _read_file(path, Reading.EVERY_LINE)
    fast, _ = _read_file(path, Reading.GATED)
    assert [f.where for f in fast] == [f.where for f in full]


@pytest.mark.usefixtures("small_chunks")
def test_a_docker_compose_log_reads_the_same_and_its_tables_are_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`docker compose logs` puts "vllm-1  | " before every line: the "|" that ends a table row is what
    marks it, not the "|" of the prefix (which made every line of such a log go to every parser)."""
    extras = {i: NVIDIA for i in range(100, 3000, 500)} | {2990: OOM}
    lines = _log(random.Random(13), 3000, extras).decode().splitlines()
    text = "".join(f"vllm-1  | {line}\n" for line in lines).encode()
    evidence = assert_same_reading(text)
    assert evidence.count(GpuProcess) == 6
    assert evidence.count(LoadSample) > 1000
    fed: list[int] = []
    real = gated.feed_line
    monkeypatch.setattr(
        gated, "feed_line", lambda ctx, parsers, line: fed.append(1) or real(ctx, parsers, line)
    )
    _read(text, Reading.GATED)
    assert len(fed) < len(lines) // 4  # the tables, the traceback, the series lines the store keeps


def test_a_garbled_number_skips_its_line_not_the_diagnosis() -> None:
    """A stats line whose usage reads "9.5.3%" (two lines run together, a torn write) matches the parsers'
    patterns but is no number: that line is skipped with a note, the OOM after it is still diagnosed."""
    text = (
        "INFO 11-29 08:00:00 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
        "Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 9.5.3%\n"
        "[2025-01-01 12:00:00 TP0] Decode batch. #running-req: 12, #token: 34567, token usage: 0.4.2, "
        "#queue-req: 0\n" + OOM + "\n"
    )
    evidence = assert_same_reading(text.encode())
    samples = [f for f in evidence if isinstance(f, LoadSample)]
    assert [(s.running, s.kv_usage) for s in samples] == [(3, None), (12, 0.4)]
    assert len(evidence) > 2 and diagnose(evidence).causes
    # In a large log the garbled line sits among well-formed ones: counted the same by both readers.
    lines = _log(random.Random(17), 4000, {2000: text.splitlines()[0], 3990: OOM}).decode().splitlines()
    assert_same_reading(("\n".join(lines) + "\n").encode())


def test_a_parser_that_cannot_read_a_line_skips_it_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    def garbled(self: object, line: Any, msg: Any) -> None:
        raise ValueError("could not convert string to float: '9.5.3'")

    monkeypatch.setattr(LINE_SOURCES[1].Parser, "feed", garbled)
    evidence, doc = _read((OOM + "\n").encode(), Reading.AUTO)
    assert doc.skipped[0] == "line 1: not read (could not convert string to float: '9.5.3')"
    assert len(evidence) > 0
