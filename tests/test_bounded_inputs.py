"""The reliability campaign's findings outside watch and diagnose, one test each: FIFOs and endless streams
(H4), YAML refused by size and node count (H7), deep JSON (C9), numbers out of range (C10), Azure traces in
UTC (W7), a NaN threshold (W8), wrong types through the Python API (C12), sweeps over ignored names (W2), huge
values echoed in errors (U4)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from tests.run_oomguard import oomguard

from oomguard import inputs, yaml_input
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
        _one_line_error(oomguard(*args), "more than")


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
    _one_line_error(oomguard("plan", "--gpu", "H100", "--", "vllm", "serve", "--config", str(big)), "MiB")
    assert time.monotonic() - start < 20


def test_h7_a_vllm_config_is_refused_past_one_mib(tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text("model: Qwen/Qwen3-0.6B\n" + "".join(f"k{i}: {i}\n" for i in range(120_000)))
    _one_line_error(oomguard("plan", "--gpu", "H100", "--", "vllm", "serve", "--config", str(keys)), "1 MiB")


def test_h7_a_manifest_with_too_many_values_is_refused_before_it_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the real limit counts 500,000 values; the same counting on a smaller limit keeps the test fast
    monkeypatch.setattr(yaml_input, "MAX_NODES", 1000)
    monkeypatch.setattr(yaml_input, "COUNT_NODES_FROM_BYTES", 0)
    text = "".join(f"k{i}: {i}\n" for i in range(501))
    with pytest.raises(InputFormatError, match="more than 1,000 values"):
        yaml_input.load_yaml_documents(text, "m.yaml", InputFormatError)
    constructed: list[object] = []
    monkeypatch.setattr(yaml_input, "_check_size", lambda *a: constructed.append(a))
    with pytest.raises(InputFormatError):
        yaml_input.load_yaml_documents(text, "m.yaml", InputFormatError)
    assert not constructed  # refused before any document was built
    assert yaml_input.load_yaml_documents("".join(f"k{i}: {i}\n" for i in range(499)), "m", InputFormatError)


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
        _one_line_error(oomguard("plan", str(tmp_path / name), "--gpu", "H100"))


def test_c9_a_deep_json_flag_is_a_one_line_error() -> None:
    deep = "[" * 20_000 + "]" * 20_000
    _one_line_error(
        oomguard("plan", "--gpu", "H100", "--", "vllm", "serve", "Qwen/Qwen3-0.6B", "--hf-overrides", deep)
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
    result = oomguard("simulate", str(trace), "--model", "Qwen/Qwen3-0.6B", "--gpu", "H100")
    assert (
        result.returncode == 2
        and "nested too deeply" in result.stderr
        and "internal error" not in result.stderr
    )


def test_w7_azure_timestamps_are_read_as_utc(monkeypatch: pytest.MonkeyPatch) -> None:
    from oomguard.simulation.workload import _azure_timestamp

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
        oomguard(
            "check", "--min-concurrency", "nan", "--gpu", "H100", "--", "vllm", "serve", "Qwen/Qwen3-0.6B"
        )
    )


def test_u4_a_huge_value_in_an_error_is_cut_not_echoed(tmp_path: Path) -> None:
    trace = tmp_path / "ids.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,prefix_ids\n0,10,5," + "9" * 5000 + "\n")
    result = oomguard("simulate", str(trace), "--model", "Qwen/Qwen3-0.6B", "--gpu", "H100")
    _one_line_error(result, "prefix id", "5,002 characters")
    assert len(result.stderr) < 300


def test_u4_every_cli_error_is_one_line_of_bounded_length() -> None:
    from oomguard.errors import MAX_ERROR_CHARS, one_line, shown

    assert one_line("a\nb") == "a b"
    assert len(one_line("x" * 10_000)) <= MAX_ERROR_CHARS
    assert shown("x" * 10_000).endswith("(10,002 characters)") and len(shown("x" * 10_000)) < 100


@pytest.mark.parametrize(
    ("sweep", "words"),
    [
        ("model=Qwen/Qwen3-8B", ("not a vLLM setting",)),
        ("no_such_flag=1,2", ("no_such_flag",)),
        ("port=1,2", ("not a vLLM setting",)),
        ("enable_prefix_caching=maybe", ("not true or false",)),
    ],
)
def test_w2_a_sweep_over_a_name_the_simulation_ignores_is_refused(sweep: str, words: tuple[str, ...]) -> None:
    result = oomguard("simulate", "--synthetic", "poisson:rate=5,duration=5", "--model", "Qwen/Qwen3-0.6B",
                      "--gpu", "H100", "--sweep", sweep)  # fmt: skip
    _one_line_error(result, *words)


def test_w2_a_sweep_value_that_serves_nothing_is_not_safe() -> None:
    result = oomguard("simulate", "--synthetic", "poisson:rate=5,duration=5", "--model", "Qwen/Qwen3-0.6B",
                      "--gpu", "H100", "--sweep", "max_model_len=1,10", "--json")  # fmt: skip
    assert result.returncode == 1, result.stderr
    runs = json.loads(result.stdout)
    assert runs["largest_safe"] is None and all(r["finished"] == 0 for r in runs["runs"]), runs


C12_CALLS = {
    "plan(123)": lambda api, P: api.plan(123),
    "plan gpu=123": lambda api, P: api.plan(model="Qwen/Qwen3-0.6B", gpu=123),
    "PlanRequest gpu=123": lambda api, P: P(model="Qwen/Qwen3-0.6B", gpu=123),
    "gpu_memory nan": lambda api, P: P(model="Qwen/Qwen3-0.6B", gpu_memory=float("nan")),
    "gpu_memory inf": lambda api, P: api.plan(model="Qwen/Qwen3-0.6B", gpu_memory=float("inf")),
    "replicas '2'": lambda api, P: api.plan(model="Qwen/Qwen3-0.6B", gpu="H100", replicas_per_gpu="2"),
    "usage bogus": lambda api, P: P(model="Qwen/Qwen3-0.6B", usage="bogus"),
    "measured None": lambda api, P: P(model="Qwen/Qwen3-0.6B", measured=None),
    "measured weights < 0": lambda api, P: P(model="Qwen/Qwen3-0.6B", measured={"weights": -(10**12)}),
    "other '1GiB'": lambda api, P: api.plan(model="Qwen/Qwen3-0.6B", used_by_other_processes="1GiB"),
    "other nan": lambda api, P: P(model="Qwen/Qwen3-0.6B", used_by_other_processes=float("nan")),
    "from_argv(None)": lambda api, P: P.from_argv(None),
    "check_command(123)": lambda api, P: check_command(123),
    "at_lengths ['x']": lambda api, P: api.plan(model="Qwen/Qwen3-0.6B", gpu="H100", at_lengths=["x"]),
    "node_gpus 'x'": lambda api, P: api.plan(model="Qwen/Qwen3-0.6B", gpu="H100", node_gpus="x"),
    "diagnose(123)": lambda api, P: api.diagnose(123),
}


def check_command(command: object) -> object:
    from oomguard.planning.check import check_command as check

    return check(command)  # type: ignore[arg-type]


@pytest.mark.parametrize("call", list(C12_CALLS))
def test_c12_a_wrong_type_through_the_api_is_a_config_error_naming_the_field(call: str) -> None:
    import oomguard
    from oomguard.errors import OomguardError
    from oomguard.planning import PlanRequest

    with pytest.raises(OomguardError):
        C12_CALLS[call](oomguard, PlanRequest)


def test_c12_right_types_still_plan() -> None:
    from oomguard.planning import PlanRequest, plan

    result = plan(PlanRequest(model="Qwen/Qwen3-0.6B", gpu="H100", usage="llm", gpu_memory=80.0 * 2**30,
                              measured={"non_torch": -(2**20)}))  # fmt: skip
    assert result.kv.num_gpu_blocks > 0
