"""The SGLang launch command as users type it -> LaunchArgs (ServerArgs field names, unknown flags kept).

    python -m sglang.launch_server --model-path M --tp 2 --mem-fraction-static 0.85 --context-length 32768
    sglang serve --model-path M --tp-size 2

Flag spellings and aliases follow SGLang's `server_args.py` (`--tp`/`--tp-size`/`--tensor-parallel-size` ...).
Flags oomguard does not model are kept verbatim in `unknown_flags` and named in the plan's notes. The command
is read by the shared tokenizer (`engines/flag_tokens.py`); this module is SGLang's table of flags.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oomguard.engines.flag_tokens import (
    EngineArgs,
    read_bool,
    read_float,
    read_int,
    read_str,
    split_command,
    take_env,
    tokenize,
)
from oomguard.errors import ConfigError

Reader = Callable[[str, str], Any]

# ServerArgs field -> (flag spellings, how the value is read); None: a store_true switch.
FLAGS: dict[str, tuple[tuple[str, ...], Reader | None]] = {
    "model_path": (("--model-path", "--model"), read_str),
    "tp_size": (("--tp-size", "--tp", "--tensor-parallel-size"), read_int),
    "pp_size": (("--pp-size", "--pp", "--pipeline-parallel-size"), read_int),
    "dp_size": (("--dp-size", "--dp", "--data-parallel-size"), read_int),
    "ep_size": (("--ep-size", "--ep", "--expert-parallel-size"), read_int),
    "mem_fraction_static": (("--mem-fraction-static",), read_float),
    "context_length": (("--context-length",), read_int),
    "chunked_prefill_size": (("--chunked-prefill-size",), read_int),
    "max_prefill_tokens": (("--max-prefill-tokens",), read_int),
    "max_running_requests": (("--max-running-requests",), read_int),
    "max_total_tokens": (("--max-total-tokens",), read_int),
    "page_size": (("--page-size",), read_int),
    "kv_cache_dtype": (("--kv-cache-dtype",), read_str),
    "dtype": (("--dtype",), read_str),
    "quantization": (("--quantization",), read_str),
    "cuda_graph_max_bs": (("--cuda-graph-max-bs",), read_int),
    "swa_full_tokens_ratio": (("--swa-full-tokens-ratio",), read_float),
    "speculative_algorithm": (("--speculative-algorithm", "--speculative-algo"), read_str),
    "speculative_num_draft_tokens": (("--speculative-num-draft-tokens",), read_int),
    "disable_cuda_graph": (("--disable-cuda-graph",), None),
    "enable_dp_attention": (("--enable-dp-attention",), None),
    "disable_hybrid_swa_memory": (("--disable-hybrid-swa-memory",), None),
    "disable_radix_cache": (("--disable-radix-cache",), None),
    "trust_remote_code": (("--trust-remote-code",), None),
    "host": (("--host",), read_str),
    "port": (("--port",), read_int),
    "served_model_name": (("--served-model-name",), read_str),
}
_BY_FLAG: dict[str, str] = {flag: name for name, (flags, _) in FLAGS.items() for flag in flags}


@dataclass(frozen=True)
class LaunchArgs(EngineArgs):
    """What the user asked SGLang for: ServerArgs field names -> values, in the order given."""

    def to_argv(self) -> list[str]:
        """The command as SGLang takes it (for a fix to print)."""
        argv = ["python", "-m", "sglang.launch_server"]
        if self.model:
            argv += ["--model-path", self.model]
        for name, value in self.values.items():
            if name == "model_path":
                continue
            flag = FLAGS[name][0][0] if name in FLAGS else "--" + name.replace("_", "-")
            if value is True:
                argv.append(flag)
            elif value is not False and value is not None:
                argv += [flag, str(value)]
        # An unknown flag is kept with its value as one entry ("--attention-backend fa3").
        return argv + [word for entry in self.unknown_flags for word in entry.split(" ", 1)]


def is_sglang_command(argv: Sequence[str]) -> bool:
    """`python -m sglang.launch_server ...`, `sglang serve ...` (or a path to the `sglang` script)."""
    for i, token in enumerate(argv[:8]):
        if token in ("sglang.launch_server", "sglang.launch_server.py"):
            return True
        if token.rsplit("/", 1)[-1] == "sglang" and i + 1 < len(argv) and argv[i + 1] == "serve":
            return True
    return False


def _strip_launcher(argv: list[str]) -> list[str]:
    """Drop `python -m sglang.launch_server` / `sglang serve`; keep the flags after it."""
    for j, token in enumerate(argv[:8]):
        if token in ("sglang.launch_server", "sglang.launch_server.py"):
            return argv[j + 1 :]
        if token.rsplit("/", 1)[-1] == "sglang" and j + 1 < len(argv) and argv[j + 1] == "serve":
            return argv[j + 2 :]
    return argv


def _takes_value(flag: str) -> bool | None:
    """The table's answer for the shared tokenizer: True takes a value, False is a switch, None unknown."""
    name = _BY_FLAG.get(flag)
    return None if name is None else FLAGS[name][1] is not None


def parse_launch_command(command: Sequence[str] | str) -> LaunchArgs:
    """Parse the user's own SGLang launch command (a pasted string or an argv list)."""
    env, argv = take_env(split_command(command))
    values: dict[str, Any] = {}
    unknown: list[str] = []
    model: str | None = None
    for token in tokenize(_strip_launcher(argv), _takes_value):
        if token.positional:
            if model is None and "model_path" not in values:
                model = token.name
            else:
                unknown.append(token.name)
            continue
        if not token.known:
            unknown.append(token.raw)
            continue
        name = _BY_FLAG[token.name]
        reader = FLAGS[name][1]
        if reader is None:
            values[name] = read_bool(token.name, token.value) if token.value is not None else True
        else:
            values[name] = reader(token.name, token.value or "")
    if "model_path" in values:
        model = str(values.pop("model_path"))
    return LaunchArgs(model, values, env, tuple(unknown))


def args_from_mapping(flags: Mapping[str, Any]) -> LaunchArgs:
    """ServerArgs-named values (tp_size=2, mem_fraction_static=0.85), checked against the known fields."""
    values: dict[str, Any] = {}
    for name, value in flags.items():
        if name not in FLAGS:
            raise ConfigError(f"unknown SGLang setting {name!r}")
        values[name] = value
    model = values.pop("model_path", None)
    return LaunchArgs(str(model) if model else None, values)
