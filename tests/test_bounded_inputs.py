"""The reliability campaign's findings outside watch, one test each: FIFOs and endless streams (H4), YAML
refused by size (H7), deep JSON (C9), numbers out of range (C10), Azure traces in UTC (W7), a NaN threshold
(W8)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oomguard import inputs
from oomguard.errors import ConfigError, InputFormatError
from oomguard.inputs import loads_json, read_bounded

QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 10,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
}


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oomguard", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


def _one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "internal error" not in result.stderr, (
        result.stderr
    )
    for word in words:
        assert word in result.stderr, result.stderr


def test_h4_a_fifo_without_a_writer_is_refused_after_a_stall(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    monkeypatch.setattr(inputs, "STALL_S", 0.3)
    start = time.monotonic()
    with pytest.raises(InputFormatError, match="nothing arrived"):
        read_bounded(fifo, limit=1 << 20, what="deployment file", error=InputFormatError)
    assert time.monotonic() - start < 2.0


def test_h4_an_endless_stream_is_refused_at_the_limit_not_buffered() -> None:
    with pytest.raises(ConfigError, match="endless stream"):
        read_bounded("/dev/zero", limit=1 << 20, what="config file", error=ConfigError)
    for args in (["check", "/dev/zero"], ["plan", "--gpu", "H100", "--", "vllm", "serve", "--config", "/dev/zero"],  # noqa: E501
                 ["plan", "Qwen/Qwen3-0.6B", "--gpu", "H100", "--nvidia-smi", "/dev/zero"]):  # fmt: skip
        _one_line_error(_cli(*args), "more than")


def test_h4_a_process_substitution_still_reads(tmp_path: Path) -> None:
    read, write = os.pipe()
    os.write(write, b"model: Qwen/Qwen3-0.6B\n")
    os.close(write)
    assert read_bounded(f"/dev/fd/{read}", limit=1 << 20, what="config", error=ConfigError).startswith(
        b"model"
    )
    os.close(read)


def test_h7_a_large_yaml_is_refused_by_its_size_before_parsing(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("model: Qwen/Qwen3-0.6B\nx: [" + ", ".join(["1"] * 3_000_000) + "]\n")
    start = time.monotonic()
    _one_line_error(_cli("plan", "--gpu", "H100", "--", "vllm", "serve", "--config", str(big)), "MiB")
    assert time.monotonic() - start < 20


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"a": NaN}', "not a finite number"),
        ('{"a": Infinity}', "not a finite number"),
        ("[1e400]", "out of range"),
        ("[" + "1" * 401 + "]", "out of range"),
    ],
)
def test_c9_c10_json_depth_and_numbers_are_refused_in_one_line(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        loads_json(text, "config.json", ConfigError)


def test_c9_c10_plan_refuses_hostile_config_json(tmp_path: Path) -> None:
    cases = {
        "deep": '{"a":' * 200_000 + "1" + "}" * 200_000,
        "layers": json.dumps(QWEN3).replace(
            '"num_hidden_layers": 10', '"num_hidden_layers": ' + "1" + "0" * 400
        ),
        "rope_huge": json.dumps({**QWEN3, "rope_scaling": {"rope_type": "yarn", "factor": 1e308}}),
        "rope_negative": json.dumps({**QWEN3, "rope_scaling": {"rope_type": "linear", "factor": -1000}}),
        "rope_nan": json.dumps({**QWEN3, "rope_scaling": {"rope_type": "linear", "factor": float("nan")}}),
    }
    for name, text in cases.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(text)
        _one_line_error(_cli("plan", str(tmp_path / name), "--gpu", "H100"))


def test_c9_a_deep_json_flag_is_a_one_line_error() -> None:
    deep = "[" * 20_000 + "]" * 20_000
    _one_line_error(
        _cli("plan", "--gpu", "H100", "--", "vllm", "serve", "Qwen/Qwen3-0.6B", "--hf-overrides", deep)
    )


def test_c10_a_safetensors_index_with_an_infinite_total_is_refused(tmp_path: Path) -> None:
    from oomguard.models.safetensors import read_index

    for total in ("Infinity", "NaN", "1e400"):
        index = tmp_path / "model.safetensors.index.json"
        index.write_text('{"metadata": {"total_size": ' + total + '}, "weight_map": {}}')
        with pytest.raises(InputFormatError):
            read_index(index)


def test_c9_a_deep_jsonl_trace_line_is_a_bad_row(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5}\n' + "[" * 100_000 + "]" * 100_000 + "\n"
    )
    result = _cli("simulate", str(trace), "--model", "Qwen/Qwen3-0.6B", "--gpu", "H100")
    assert (
        result.returncode == 2
        and "nested too deeply" in result.stderr
        and "internal error" not in result.stderr
    )


def test_w7_azure_timestamps_are_read_as_utc(monkeypatch: pytest.MonkeyPatch) -> None:
    from oomguard.simulate.workload import _azure_timestamp

    before, after = "2024-11-03 05:50:00.0000000", "2024-11-03 06:50:00.0000000"  # across New York's DST end
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        assert _azure_timestamp(after) - _azure_timestamp(before) == 3600.0
        assert _azure_timestamp(before) == 1730613000.0
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_w8_a_nan_concurrency_threshold_is_refused_not_ignored() -> None:
    from oomguard.planning.check import check_command

    with pytest.raises(ConfigError):
        check_command("vllm serve Qwen/Qwen3-0.6B", gpu="H100", min_concurrency=float("nan"))
    with pytest.raises(ConfigError):
        check_command("vllm serve Qwen/Qwen3-0.6B", gpu="H100", min_concurrency="8")  # type: ignore[arg-type]
    _one_line_error(
        _cli("check", "--min-concurrency", "nan", "--gpu", "H100", "--", "vllm", "serve", "Qwen/Qwen3-0.6B")
    )
