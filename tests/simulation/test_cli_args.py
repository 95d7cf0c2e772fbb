"""`oomguard simulate` arguments: vLLM flags anywhere, their values never taken for the trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oomguard.cli import main as oomguard

ORACLE_LLAMA = "tools/vllm_oracle/configs/Llama-3.1-8B"


def _seed002(shared_data: Path) -> tuple[Path, dict, dict]:
    ref = shared_data / "scheduler_reference" / "seed002_mixed"
    oracle_args = json.loads((ref / "params.json").read_text())["oracle_args"]
    return ref, oracle_args, json.loads((ref / "summary.json").read_text())


def test_a_flag_value_before_the_trace_is_not_taken_for_the_trace(
    shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ref, a, oracle = _seed002(shared_data)
    argv = [
        "simulate",
        "--max-num-seqs",
        str(a["max_num_seqs"]),
        "--num-gpu-blocks-override",
        str(a["num_gpu_blocks"]),
        str(ref / "workload.jsonl"),
        "--model",
        str(shared_data.parent / ORACLE_LLAMA),
        "--max-num-batched-tokens",
        str(a["max_num_batched_tokens"]),
        "--max-model-len",
        str(a["max_model_len"]),
        "--no-async-scheduling",
        "--no-enable-prefix-caching",
        "--json",
    ]
    assert oomguard(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["setup"]["max_num_seqs"] == a["max_num_seqs"]
    assert out["steps"] == oracle["total_steps"]


def test_flags_before_the_double_dash_override_the_pasted_command(
    shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ref, a, _ = _seed002(shared_data)
    model = str(shared_data.parent / ORACLE_LLAMA)
    argv = [
        "simulate",
        str(ref / "workload.jsonl"),
        "--max-num-seqs",
        "8",
        "--json",
        "--",
        "vllm",
        "serve",
        model,
        "--max-num-seqs",
        "64",
        "--num-gpu-blocks-override",
        str(a["num_gpu_blocks"]),
        "--max-model-len",
        str(a["max_model_len"]),
        "--max-num-batched-tokens",
        "32768",
    ]
    assert oomguard(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["setup"]["model"] == model
    assert out["setup"]["max_num_seqs"] == 8
    assert out["max_running"] <= 8


@pytest.mark.parametrize(
    ("argv", "what"),
    [
        (["--frobnicate", "3"], "unknown option --frobnicate"),
        (["--max-num-seqs"], "--max-num-seqs needs a value"),
        (["second.csv"], "unrecognized arguments: second.csv"),
        (["--layout", "diagonal"], "invalid choice"),
    ],
)
def test_bad_arguments_are_one_line_errors_with_exit_2(
    shared_data: Path, capsys: pytest.CaptureFixture[str], argv: list[str], what: str
) -> None:
    trace = shared_data / "scheduler_reference" / "seed002_mixed" / "workload.jsonl"
    assert oomguard(["simulate", str(trace), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert what in err and "\n" not in err


def test_an_unknown_vllm_flag_with_its_value_inline_is_accepted(
    shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ref, a, oracle = _seed002(shared_data)
    argv = [
        "simulate",
        str(ref / "workload.jsonl"),
        "--some-future-vllm-flag=7",
        "--model",
        str(shared_data.parent / ORACLE_LLAMA),
        "--num-gpu-blocks-override",
        str(a["num_gpu_blocks"]),
        "--max-num-seqs",
        "64",
        "--max-num-batched-tokens",
        "32768",
        "--max-model-len",
        str(a["max_model_len"]),
        "--no-async-scheduling",
        "--no-enable-prefix-caching",
        "--json",
    ]
    assert oomguard(argv) == 0
    assert json.loads(capsys.readouterr().out)["steps"] == oracle["total_steps"]
