"""C4 of the reliability campaign: a trace is streamed into columns, so a large one costs bytes per row, not
Python objects per row, and a replay cut short never builds the requests that did not arrive."""

from __future__ import annotations

import os
import threading
import tracemalloc
from pathlib import Path

import pytest

from oomguard.cli import main as oomguard
from oomguard.errors import InputFormatError
from oomguard.simulation import workload as wl

ROWS = 200_000
# Columns hold 24 bytes a row; the reader's transient objects (a line, its fields) are freed row by row.
# Reading into one object per row cost ~550 bytes a row.
MAX_BYTES_PER_ROW = 40


def _trace(path: Path, rows: int) -> Path:
    """Arrivals at 50/s, prompts and outputs of varied length: the shape of the report's trace."""
    with path.open("w") as out:
        out.write("arrival_s,prompt_tokens,output_tokens\n")
        out.writelines(
            f"{k * 0.02:.4f},{50 + k * 7919 % 1950},{10 + k * 104729 % 290}\n" for k in range(rows)
        )
    return path


def test_a_large_trace_is_held_in_bytes_per_row(tmp_path: Path) -> None:
    path = _trace(tmp_path / "rows.csv", ROWS)
    tracemalloc.start()
    try:
        workload = wl.read_workload(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(workload.requests) == ROWS
    assert peak / ROWS < MAX_BYTES_PER_ROW, f"{peak / ROWS:.0f} bytes per row"
    last = workload.requests[-1]
    k = ROWS - 1
    assert (last.rid, last.arrival, last.prompt_tokens, last.output_tokens) == (
        f"r{k}",
        pytest.approx(k * 0.02),
        50 + k * 7919 % 1950,
        10 + k * 104729 % 290,
    )


def test_a_replay_cut_short_builds_only_the_requests_that_arrived(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _trace(tmp_path / "rows.csv", ROWS)
    tracemalloc.start()
    try:
        code = oomguard(
            ["simulate", str(path), "--model", "Qwen/Qwen3-0.6B", "--gpu", "H100", "--max-steps", "1"]
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert code == 0, capsys.readouterr().err
    assert "stopped after --max-steps 1" in capsys.readouterr().out
    # the planner and the model facts take a few MB whatever the trace; one object per row would add ~100 MB
    assert peak < 30 * 2**20, f"{peak / 2**20:.0f} MiB"


def test_a_trace_is_read_from_a_pipe_as_it_arrives(tmp_path: Path) -> None:
    read, write = os.pipe()

    def writer() -> None:
        with os.fdopen(write, "w") as out:
            out.write("arrival_s,prompt_tokens,output_tokens\n")
            for k in range(5_000):
                out.write(f"{k},{k % 50 + 1},3\n")

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        workload = wl.read_workload(f"/dev/fd/{read}")
    finally:
        thread.join()
        os.close(read)
    assert len(workload.requests) == 5_000 and workload.requests[4_999].prompt_tokens == 4_999 % 50 + 1


def test_an_endless_stream_of_rows_is_refused_at_the_column_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wl, "MAX_COLUMN_BYTES", 1 << 20)  # 43,690 rows of 24 bytes
    path = _trace(tmp_path / "rows.csv", 100_000)
    with pytest.raises(
        InputFormatError, match=r"rows\.csv:\d+: more than 1 MiB of requests .*split the trace"
    ):
        wl.read_workload(path)


def test_a_bad_row_after_fast_rows_is_checked_against_them(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n5,10,5\n3,1.0,2\n")
    with pytest.raises(InputFormatError, match=r"t\.csv:4: timestamps go backwards \(3 after 5\)"):
        wl.read_workload(path)
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n5,10,5\n6,2.0,3\n\n7,3,3,extra\n")
    workload = wl.read_workload(path)
    assert [(r.arrival, r.prompt_tokens) for r in workload.requests] == [(0, 10), (5, 10), (6, 2), (7, 3)]


def test_windows_and_rate_scaling_keep_each_request_its_name(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": [1, 2]}\n'
        '{"timestamp": 1000, "input_length": 6, "output_length": 2}\n'
        '{"timestamp": 2000, "input_length": 7, "output_length": 2, "hash_ids": [18446744073709551615]}\n'
    )
    workload = wl.window(wl.read_workload(path), 0.5, None)
    assert [(r.rid, r.arrival, r.prefix_ids) for r in workload.requests] == [
        ("r1", 0.0, ()),
        ("r2", 1.0, (18446744073709551615,)),
    ]
    assert [r.arrival for r in wl.scale_rate(workload, 4.0).requests] == [0.0, 0.25]
