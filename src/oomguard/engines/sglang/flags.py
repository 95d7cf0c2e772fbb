"""The SGLang launch command as users type it -> LaunchArgs (ServerArgs field names, unknown flags kept).

    python -m sglang.launch_server --model-path M --tp 2 --mem-fraction-static 0.85 --context-length 32768
    sglang serve --model-path M --tp-size 2

Flag spellings and aliases follow SGLang's `server_args.py` (`--tp`/`--tp-size`/`--tensor-parallel-size` ...).
Flags oomguard does not model are kept verbatim in `unknown_flags` and named in the plan's notes.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from oomguard.errors import ConfigError


def _int(name: str, text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise ConfigError(f"{name} expects a whole number, got {text!r}") from None
    if abs(value) > 1 << 50:
        raise ConfigError(f"{name} {text} is out of range")
    return value


def _float(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{name} expects a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{name} expects a finite number, got {text!r}")
    return value


def _str(_name: str, text: str) -> str:
    return text


Reader = Callable[[str, str], Any]

# ServerArgs field -> (flag spellings, how the value is read); None: a store_true switch.
FLAGS: dict[str, tuple[tuple[str, ...], Reader | None]] = {
    "model_path": (("--model-path", "--model"), _str),
    "tp_size": (("--tp-size", "--tp", "--tensor-parallel-size"), _int),
    "pp_size": (("--pp-size", "--pp", "--pipeline-parallel-size"), _int),
    "dp_size": (("--dp-size", "--dp", "--data-parallel-size"), _int),
    "ep_size": (("--ep-size", "--ep", "--expert-parallel-size"), _int),
    "mem_fraction_static": (("--mem-fraction-static",), _float),
    "context_length": (("--context-length",), _int),
    "chunked_prefill_size": (("--chunked-prefill-size",), _int),
    "max_prefill_tokens": (("--max-prefill-tokens",), _int),
    "max_running_requests": (("--max-running-requests",), _int),
    "max_total_tokens": (("--max-total-tokens",), _int),
    "page_size": (("--page-size",), _int),
    "kv_cache_dtype": (("--kv-cache-dtype",), _str),
    "dtype": (("--dtype",), _str),
    "quantization": (("--quantization",), _str),
    "cuda_graph_max_bs": (("--cuda-graph-max-bs",), _int),
    "swa_full_tokens_ratio": (("--swa-full-tokens-ratio",), _float),
    "speculative_algorithm": (("--speculative-algorithm", "--speculative-algo"), _str),
    "speculative_num_draft_tokens": (("--speculative-num-draft-tokens",), _int),
    "disable_cuda_graph": (("--disable-cuda-graph",), None),
    "enable_dp_attention": (("--enable-dp-attention",), None),
    "disable_hybrid_swa_memory": (("--disable-hybrid-swa-memory",), None),
    "disable_radix_cache": (("--disable-radix-cache",), None),
    "trust_remote_code": (("--trust-remote-code",), None),
    "host": (("--host",), _str),
    "port": (("--port",), _int),
    "served_model_name": (("--served-model-name",), _str),
}
_BY_FLAG: dict[str, str] = {flag: name for name, (flags, _) in FLAGS.items() for flag in flags}
# `KEY=value` before the launcher is an environment variable (SGLANG_*, CUDA_VISIBLE_DEVICES ...).
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class LaunchArgs:
    """What the user asked SGLang for: ServerArgs field names -> values, in the order given."""

    model: str | None
    values: Mapping[str, Any]
    env: Mapping[str, str] = field(default_factory=dict)
    unknown_flags: tuple[str, ...] = ()

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def with_values(self, **changes: Any) -> LaunchArgs:
        merged = dict(self.values)
        merged.update(changes)
        return LaunchArgs(self.model, merged, self.env, self.unknown_flags)

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
        return argv + list(self.unknown_flags)


def is_sglang_command(argv: Sequence[str]) -> bool:
    """`python -m sglang.launch_server ...`, `sglang serve ...` (or a path to the `sglang` script)."""
    for i, token in enumerate(argv[:8]):
        if token in ("sglang.launch_server", "sglang.launch_server.py"):
            return True
        if token.rsplit("/", 1)[-1] == "sglang" and i + 1 < len(argv) and argv[i + 1] == "serve":
            return True
    return False


def _split(command: Sequence[str] | str) -> list[str]:
    if isinstance(command, str):
        try:
            return shlex.split(command.replace("\\\n", " "))
        except ValueError as err:
            raise ConfigError(f"cannot split the command line: {err}") from None
    return [a for a in command if a not in ("\\", "\n")]


def _strip_launcher(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """Drop `env`/`KEY=value`/`python -m sglang.launch_server`/`sglang serve`; keep the flags after it."""
    env: dict[str, str] = {}
    i = 0
    while i < len(argv) and (argv[i] == "env" or _ENV.match(argv[i])):
        if argv[i] != "env":
            key, _, value = argv[i].partition("=")
            env[key] = value
        i += 1
    rest = argv[i:]
    for j, token in enumerate(rest[:8]):
        if token in ("sglang.launch_server", "sglang.launch_server.py"):
            return rest[j + 1 :], env
        if token.rsplit("/", 1)[-1] == "sglang" and j + 1 < len(rest) and rest[j + 1] == "serve":
            return rest[j + 2 :], env
    return rest, env


def parse_launch_command(command: Sequence[str] | str) -> LaunchArgs:
    """Parse the user's own SGLang launch command (a pasted string or an argv list)."""
    tokens, env = _strip_launcher(_split(command))
    values: dict[str, Any] = {}
    unknown: list[str] = []
    model: str | None = None
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("-"):
            if model is None and "model_path" not in values:
                model = token
            else:
                unknown.append(token)
            continue
        flag, has_inline, inline = token.partition("=")
        name = _BY_FLAG.get(flag) or _BY_FLAG.get(flag.replace("_", "-"))
        if name is None:
            unknown.append(token)
            # Keep an unknown flag's value with it (a following token that is not a flag).
            if not has_inline and i < len(tokens) and not tokens[i].startswith("-"):
                unknown.append(tokens[i])
                i += 1
            continue
        reader = FLAGS[name][1]
        if reader is None:
            values[name] = inline.lower() not in ("false", "0", "no") if has_inline else True
            continue
        if not has_inline:
            if i >= len(tokens):
                raise ConfigError(f"{flag} needs a value")
            inline, i = tokens[i], i + 1
        values[name] = reader(flag, inline)
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
