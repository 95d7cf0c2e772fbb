"""The reliability campaign's diagnose findings, each as the input that found it: a snapshot pickle of shared
references (H5), snapshot fields of the wrong type (C8), a refused pickle given alone (U3), an infinite
request count in a metrics file (C7), a metrics file far larger than one scrape (C3)."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import time
import tracemalloc
from pathlib import Path

import pytest

from oomguard.diagnosis import scan
from oomguard.diagnosis.evidence import Evidence, LoadSample
from oomguard.diagnosis.read import read_one
from oomguard.diagnosis.sources import metrics
from oomguard.diagnosis.sources.torch_snapshot import RefusedPickle, load_plain, summarize
from oomguard.watch.prom_text import SkippedLine, iter_exposition, parse


def test_h5_shared_references_are_counted_once_in_linear_time() -> None:
    n = 20_000  # 80 KB: N segments sharing one list of N blocks, N^2 = 4e8 blocks if walked naively
    block = {"size": 1, "state": "active_allocated", "frames": [{"filename": "a.py", "line": 1, "name": "f"}]}
    data = pickle.dumps({"segments": [{"total_size": 1, "blocks": [block] * n}] * n}, protocol=4)
    assert len(data) < 100_000
    start = time.process_time()
    summary = summarize(load_plain(data), "laughs.pickle")
    assert time.process_time() - start < 5.0
    # one segment and one block exist: the memory they describe exists once
    assert (summary.segments, summary.reserved, summary.allocated) == (1, 1, 1)


def test_h5_distinct_blocks_are_all_counted() -> None:
    blocks = [{"size": 2, "state": "active_allocated"} for _ in range(100)]
    summary = summarize(load_plain(pickle.dumps({"segments": [{"total_size": 300, "blocks": blocks}]})), "s")
    assert summary.allocated == 200 and summary.reserved == 300


@pytest.mark.parametrize(
    ("snapshot", "field"),
    [
        ({"segments": [{"total_size": "abc"}]}, "total_size"),
        ({"segments": [{"total_size": float("inf")}]}, "total_size"),
        ({"segments": [{"total_size": 1, "blocks": 5}]}, "blocks"),
        ({"segments": [{"total_size": 1, "blocks": [{"size": [1], "state": "inactive"}]}]}, "size"),
        ({"segments": [], "device_traces": [[{"action": "oom", "size": "huge"}]]}, "size"),
        ({"segments": [], "device_traces": 7}, "device_traces"),
    ],
)
def test_c8_a_wrong_typed_snapshot_field_is_a_refused_pickle_naming_it(snapshot: object, field: str) -> None:
    with pytest.raises(RefusedPickle, match=f"'{field}'"):
        summarize(load_plain(pickle.dumps(snapshot)), "s.pickle")


def test_c8_u3_a_refused_snapshot_alone_says_why_in_one_line(run_diagnose) -> None:  # type: ignore[no-untyped-def]
    code, _, err = run_diagnose(pickle.dumps({"segments": [{"total_size": "abc"}]}), names=("s.pickle",))
    assert code == 2 and err.count("\n") == 1 and "'total_size' is 'abc'" in err


class _Hostile:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("protocol", [0, 2, 4])
def test_u3_a_refused_pickle_alone_names_the_opcode(run_diagnose, tmp_path: Path, protocol: int) -> None:  # type: ignore[no-untyped-def]
    marker = tmp_path / "pwned"
    data = pickle.dumps(_Hostile(str(marker)), protocol=protocol)
    code, _, err = run_diagnose(data, names=("snap.pickle",))
    assert not marker.exists()
    assert code == 2 and err.count("\n") == 1
    assert "refused opcode" in err and ("GLOBAL" in err), err


def test_c7_an_infinite_request_count_is_skipped_with_a_note(run_diagnose) -> None:  # type: ignore[no-untyped-def]
    prom = (
        'vllm:num_requests_running{engine="0"} +Inf\n'
        'vllm:num_requests_waiting{engine="0"} 3\n'
        'vllm:kv_cache_usage_perc{engine="0"} 0.99\n'
    )
    code, result, err = run_diagnose(prom, names=("inf.prom",))
    assert code == 0, err
    assert any("not a finite number" in note for note in result["skipped"]), result["skipped"]


C3_LINES = 200_000
C3_LINE = b'vllm:num_requests_running{engine="0"} 1\n'  # each line repeats the series: a scrape of its own


def test_c3_a_metrics_file_of_many_scrapes_is_read_in_bounded_memory() -> None:
    body = b"# TYPE vllm:num_requests_running gauge\n" + C3_LINE * C3_LINES
    stream = io.BytesIO(gzip.compress(body))
    evidence = Evidence()
    tracemalloc.start()
    try:
        doc = read_one("m.prom", gzip.GzipFile(fileobj=stream), evidence)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (doc.kind, doc.lines, doc.facts) == ("prometheus-metrics", C3_LINES + 1, C3_LINES)
    assert evidence.count(LoadSample) == C3_LINES
    # Read whole, the 8 MB text cost ~21x its size (160 MB). Streamed, memory is that of a chunk of lines
    # (the evidence keeps the first and last facts of a kind), whatever the file's size.
    assert peak < 3 * scan.CHUNK, f"{peak / 2**20:.1f} MiB for {len(body) / 2**20:.1f} MiB of text"


SCRAPES = "".join(
    f"# HELP vllm:num_requests_running Number of requests.\n# TYPE vllm:num_requests_running gauge\n"
    f'vllm:num_requests_running{{engine="0",model_name="m"}} {k}\n'
    f'vllm:num_requests_running{{engine="1",model_name="m"}} {k + 1}\n'
    f'vllm:kv_cache_usage_perc{{engine="{k % 2}",model_name="m"}} 0.{k}\n'
    f"bad line {k}\nprocess_resident_memory_bytes {k}e9\n"
    for k in range(1, 9)
).encode()


@pytest.mark.parametrize("size", [1, 7, 64, len(SCRAPES)])
def test_c3_scrapes_read_in_chunks_give_the_samples_of_the_whole_body(size: int) -> None:
    for body in (SCRAPES, SCRAPES + b"vllm:num_requests_running 3"):  # the second ends mid-line
        chunks = [body[i : i + size] for i in range(0, len(body), size)]
        streamed = list(iter_exposition(chunks))
        whole = parse(body)
        assert [s for s in streamed if not isinstance(s, SkippedLine)] == sorted(
            whole.samples(), key=lambda s: s.lineno
        )
        skipped = [s for s in streamed if isinstance(s, SkippedLine)]
        assert sorted(skipped, key=lambda s: s.lineno) == sorted(whole.skipped, key=lambda s: s.lineno)


def test_c3_a_scrape_of_more_engines_than_any_server_keeps_the_first() -> None:
    body = "".join(f'vllm:num_requests_running{{engine="{e}"}} 1\n' for e in range(2 * 512)).encode()
    evidence = Evidence()
    read = metrics.read_document("wide.prom", [body], evidence)
    assert evidence.count(LoadSample) == 512 and read.dropped_engines == 512
