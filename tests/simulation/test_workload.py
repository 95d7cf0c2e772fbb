"""Trace readers: real Azure and Mooncake files, generators, and bad input as one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomguard.cli import main as oomguard
from oomguard.errors import InputFormatError
from oomguard.simulation import workload as wl


def test_azure_conversation_trace_reads_every_row_in_seconds(shared_data: Path) -> None:
    w = wl.read_workload(shared_data / "traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv")
    assert len(w.requests) == 19366
    assert w.clock == wl.SECONDS
    assert w.requests[0].arrival == 0.0 and (w.requests[0].prompt_tokens, w.requests[0].output_tokens) == (
        374,
        44,
    )
    assert 3000 < w.duration < 3700  # about one hour


def test_mooncake_trace_keeps_hash_ids_and_converts_ms(shared_data: Path) -> None:
    w = wl.read_workload(shared_data / "traces/mooncake_fast25/conversation_trace.jsonl")
    assert len(w.requests) == 12031
    assert w.requests[1].prefix_ids[:2] == (0, 14)
    assert w.requests[-1].arrival == pytest.approx(3536.999)


def test_oracle_workload_is_step_clocked_and_stably_sorted(shared_data: Path) -> None:
    w = wl.read_workload(shared_data / "scheduler_reference/seed002_mixed/workload.jsonl")
    assert w.clock == wl.STEPS
    arrivals = [r.arrival for r in w.requests]
    assert arrivals == sorted(arrivals)


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,-3,5\n", 3, "prompt tokens must be >= 1"),
        ("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,ten,5\n", 3, "not a whole number"),
        ("arrival_s,prompt_tokens,output_tokens\n5,10,5\n1,10,5\n", 3, "timestamps go backwards"),
        ("arrival_s,prompt_tokens,output_tokens\n0,10\n", 2, "expected 3 columns"),
        (
            '{"timestamp": 0, "input_length": 5, "output_length": 2}\n{"timestamp": 1, "input_length": 5}\n',
            2,
            "missing field",
        ),
        ('{"timestamp": 0, "input_length": 5, "output_length": 2}\nnot json\n', 2, "not valid JSON"),
    ],
)
def test_malformed_rows_name_file_and_line(tmp_path: Path, text: str, line: int, what: str) -> None:
    path = tmp_path / "trace.txt"
    path.write_text(text)
    with pytest.raises(InputFormatError) as err:
        wl.read_workload(path)
    assert f"{path}:{line}:" in str(err.value) and what in str(err.value)


def test_skip_bad_rows_counts_what_it_skipped(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,-3,5\n2,x,5\n3,7,2\n")
    w = wl.read_workload(path, skip_bad_rows=True)
    assert len(w.requests) == 2 and w.skipped_rows == 2


@pytest.mark.parametrize(
    ("content", "what"),
    [
        (b"", "empty trace"),
        (b"\x00\x01\x02binary", "binary data"),
        (b"arrival_s,prompt_tokens,output_tokens\n0,10,5\n\xff\xfe,3,1\n", "bad.trace:3: not valid UTF-8"),
        (b"a,b,c\n1,2,3\n", "unknown CSV trace format"),
        (b'{"foo": 1}\n', "unknown JSONL trace format"),
    ],
)
def test_unreadable_files_are_one_line_errors_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, what: str
) -> None:
    path = tmp_path / "bad.trace"
    path.write_bytes(content)
    assert oomguard(["simulate", str(path), "--num-gpu-blocks-override", "100"]) == 2
    err = capsys.readouterr().err.strip()
    assert what in err and "\n" not in err and "Traceback" not in err


def test_rate_scaling_divides_the_gaps() -> None:
    w = wl.poisson(2.0, 100.0, wl.LengthDist.parse("100"), wl.LengthDist.parse("10"), seed=1)
    fast = wl.scale_rate(w, 10)
    assert fast.duration == pytest.approx(w.duration / 10)
    assert [r.prompt_tokens for r in fast.requests] == [r.prompt_tokens for r in w.requests]


def test_window_keeps_only_the_requests_inside_and_rebases() -> None:
    w = wl.poisson(5.0, 100.0, wl.LengthDist.parse("100"), wl.LengthDist.parse("10"), seed=2)
    part = wl.window(w, 20, 40)
    assert part.requests[0].arrival == 0.0
    assert len(part.requests) == sum(1 for r in w.requests if 20 <= r.arrival < 40)


def test_agentic_generator_has_one_long_prompt_among_growing_sessions() -> None:
    w = wl.agentic(sessions=3, turns=4)
    long = [r for r in w.requests if r.prompt_tokens > 100_000]
    assert len(long) == 1
    first, second = [r for r in w.requests if r.rid.startswith("s0t")][:2]
    assert second.prompt_tokens > first.prompt_tokens
    assert second.prefix_ids[: len(first.prefix_ids)] == first.prefix_ids


def test_azure_plain_rows_read_as_the_csv_reader_reads_them(shared_data: Path, tmp_path: Path) -> None:
    # The plain-row reader of Azure traces against the csv reader (the lower-case header takes that path).
    path = shared_data / "traces/azure_llm_inference_2023/AzureLLMInferenceTrace_code.csv"
    text = path.read_text()
    generic = tmp_path / "generic.csv"
    generic.write_text(
        text.replace("TIMESTAMP,ContextTokens,GeneratedTokens", "timestamp,contexttokens,generatedtokens", 1)
    )
    fast, slow = wl.read_workload(path), wl.read_workload(generic)
    assert len(fast.requests) == 8819
    assert fast.requests == slow.requests


@pytest.mark.parametrize(
    ("row", "what"),
    [
        ("2023-11-16 18:15:40.0000000,374,44", "timestamps go backwards"),
        ("2023-11-16 18:15:47.5000000,0,44", "prompt tokens must be >= 1"),
        ('"2023-11-16 18:15:47.5000000",37x,44', "not a whole number"),
        ("2023-13-16 18:15:47.5000000,374,44", "month must be in 1..12"),
    ],
)
def test_a_bad_azure_row_is_named_by_line(tmp_path: Path, row: str, what: str) -> None:
    head = "TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.6805900,374,44\r\n"
    path = tmp_path / "azure.csv"
    path.write_text(head + row + "\r\n2023-11-16 18:15:50.1000000,10,5\r\n", newline="")
    with pytest.raises(InputFormatError) as err:
        wl.read_workload(path)
    assert f"{path}:3:" in str(err.value) and what in str(err.value)
