"""The reliability campaign's diagnose findings, each as the input that found it: a snapshot pickle of shared
references (H5), snapshot fields of the wrong type (C8), a refused pickle given alone (U3), an infinite
request count in a metrics file (C7)."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path

import pytest

from oomguard.diagnose.sources.torch_snapshot import RefusedPickle, load_plain, summarize


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
