"""The SGLang launch command as users type it: launchers, flag spellings, unknown flags kept, bad values
refused."""

from __future__ import annotations

import pytest

from oomguard.engines.sglang.flags import is_sglang_command, parse_launch_command
from oomguard.errors import ConfigError


def test_python_m_launch_server_with_aliases() -> None:
    args = parse_launch_command(
        "python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp 2 "
        "--mem-fraction-static 0.85 --context-length 32768 --trust-remote-code"
    )
    assert args.model == "Qwen/Qwen3-8B"
    assert args.get("tp_size") == 2
    assert args.get("mem_fraction_static") == 0.85
    assert args.get("context_length") == 32768
    assert args.get("trust_remote_code") is True


def test_sglang_serve_and_long_spellings() -> None:
    args = parse_launch_command(
        ["sglang", "serve", "--model", "m", "--tensor-parallel-size=4", "--dp-size", "2"]
    )
    assert (args.model, args.get("tp_size"), args.get("dp_size")) == ("m", 4, 2)


def test_environment_before_the_launcher_is_kept_apart() -> None:
    args = parse_launch_command(
        "CUDA_VISIBLE_DEVICES=0,1 python -m sglang.launch_server --model-path m --tp-size 2"
    )
    assert args.env == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert args.get("tp_size") == 2


def test_unknown_flags_are_kept_with_their_values() -> None:
    args = parse_launch_command(
        "python -m sglang.launch_server --model-path m --attention-backend fa3 --enable-torch-compile"
    )
    assert args.unknown_flags == ("--attention-backend fa3", "--enable-torch-compile")


def test_bad_values_are_one_line_errors() -> None:
    with pytest.raises(ConfigError, match="--mem-fraction-static expects a number"):
        parse_launch_command("python -m sglang.launch_server --model-path m --mem-fraction-static lots")
    with pytest.raises(ConfigError, match="--tp needs a value"):
        parse_launch_command("python -m sglang.launch_server --model-path m --tp")


def test_launchers_are_recognised_and_vllm_is_not() -> None:
    assert is_sglang_command(["python", "-m", "sglang.launch_server", "--model-path", "m"])
    assert is_sglang_command(["/opt/venv/bin/sglang", "serve", "--model-path", "m"])
    assert not is_sglang_command(["vllm", "serve", "m"])


def test_to_argv_round_trips() -> None:
    args = parse_launch_command("python -m sglang.launch_server --model-path m --tp 2 --disable-cuda-graph")
    again = parse_launch_command(args.to_argv())
    assert again.model == "m" and again.values == args.values
