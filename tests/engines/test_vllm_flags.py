"""`vllm serve` command lines as users type them -> ServeArgs."""

from __future__ import annotations

import pytest

from oomguard.engines.vllm.flags import load_config_yaml, parse_serve_command
from oomguard.errors import ConfigError


def test_reads_a_pasted_command_with_env_short_flags_and_equals_signs() -> None:
    args = parse_serve_command(
        "CUDA_VISIBLE_DEVICES=0,1 VLLM_USE_V1=1 vllm serve meta-llama/Llama-3.1-8B-Instruct \\\n"
        "  -tp 2 --max-model-len=32768 --gpu-memory-utilization 0.9 --enable-expert-parallel"
    )
    assert args.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert args.env == {"CUDA_VISIBLE_DEVICES": "0,1", "VLLM_USE_V1": "1"}
    assert args.values["tensor_parallel_size"] == 2
    assert args.values["max_model_len"] == 32768
    assert args.values["gpu_memory_utilization"] == 0.9
    assert args.values["enable_expert_parallel"] is True


def test_negated_switches_and_human_readable_lengths() -> None:
    args = parse_serve_command(
        [
            "vllm",
            "serve",
            "m",
            "--no-enable-prefix-caching",
            "--max-model-len",
            "32K",
            "--max-num-batched-tokens",
            "16k",
        ]
    )
    assert args.values["enable_prefix_caching"] is False
    assert args.values["max_model_len"] == 32768  # uppercase K is binary, as in vLLM
    assert args.values["max_num_batched_tokens"] == 16000


def test_max_model_len_auto_and_kv_cache_memory_bytes() -> None:
    args = parse_serve_command("vllm serve m --max-model-len auto --kv-cache-memory-bytes 4.5e9")
    assert args.values["max_model_len"] == "auto"
    assert args.values["kv_cache_memory_bytes"] == 4_500_000_000


def test_compilation_config_forms() -> None:
    args = parse_serve_command("vllm serve m -O3 --compilation-config.cudagraph_mode FULL")
    assert args.values["compilation_config"] == {"level": 3, "cudagraph_mode": "FULL"}
    args = parse_serve_command(
        ["vllm", "serve", "m", "--compilation-config", '{"cudagraph_capture_sizes": [1, 2, 4]}']
    )
    assert args.values["compilation_config"] == {"cudagraph_capture_sizes": [1, 2, 4]}


def test_vllm_flags_that_move_no_memory_are_kept_and_flags_vllm_lacks_are_refused() -> None:
    args = parse_serve_command(
        "vllm serve m --max-num-queued-reqs 7 --enable-log-outputs --tool-call-parser hermes "
        "--brand-new-flag 7"
    )
    assert args.unknown_flags == ("--max-num-queued-reqs 7", "--enable-log-outputs")
    assert args.refused == ("--brand-new-flag 7",)
    assert "tool_call_parser" not in args.values


def test_api_server_and_docker_forms() -> None:
    a = parse_serve_command("python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B -tp 2")
    b = parse_serve_command("docker run --gpus all vllm/vllm-openai:latest --model Qwen/Qwen3-8B -tp 2")
    assert a.model == b.model == "Qwen/Qwen3-8B"
    assert a.values == b.values == {"tensor_parallel_size": 2}


def test_config_yaml_merges_and_the_command_line_wins(tmp_path) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text("model: Qwen/Qwen3-8B\ntensor-parallel-size: 4\nmax_model_len: 8192\nport: 8000\n")
    args = parse_serve_command(f"vllm serve --config {config} -tp 2")
    assert args.model == "Qwen/Qwen3-8B"
    assert args.values["tensor_parallel_size"] == 2
    assert args.values["max_model_len"] == 8192


def test_bad_values_are_one_line_errors(tmp_path) -> None:
    with pytest.raises(ConfigError, match="--gpu-memory-utilization must be in"):
        parse_serve_command("vllm serve m --gpu-memory-utilization 1.5")
    with pytest.raises(ConfigError, match="--max-num-seqs expects an integer"):
        parse_serve_command("vllm serve m --max-num-seqs lots")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config_yaml(str(bad))


def test_round_trip_to_a_command() -> None:
    args = parse_serve_command("vllm serve m -tp 2 --no-enable-prefix-caching")
    assert args.to_argv() == [
        "vllm",
        "serve",
        "m",
        "--tensor-parallel-size",
        "2",
        "--no-enable-prefix-caching",
    ]


def test_underscore_spellings_are_the_same_flags_as_vllm_reads_them() -> None:
    # vLLM's FlexibleArgumentParser turns --tensor_parallel_size into --tensor-parallel-size.
    args = parse_serve_command(
        "vllm serve m --tensor_parallel_size 2 --max_model_len=32768 --enable_prefix_caching"
    )
    assert args.values == {"tensor_parallel_size": 2, "max_model_len": 32768, "enable_prefix_caching": True}
    assert args.unknown_flags == ()


def test_integers_are_read_as_argparse_reads_them() -> None:
    assert parse_serve_command("vllm serve m -tp 1_0").values["tensor_parallel_size"] == 10
    with pytest.raises(ConfigError, match="-tp expects an integer"):
        parse_serve_command("vllm serve m -tp 1e0")
