"""The one reader of launch commands both engines' flag tables sit on: splitting a pasted command, the
environment prefix, `--flag value` / `--flag=value`, underscore spellings (vLLM's FlexibleArgumentParser and
SGLang's both accept `--max_model_len` for `--max-model-len`), and the value readers every table uses.

An engine's `flags.py` keeps only its table: which flags it knows, whether each takes a value, how the value
is read, and its launcher words.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from oomguard.api_fields import check_command_type
from oomguard.errors import ConfigError

if TYPE_CHECKING:  # Self is typing's from Python 3.11; annotations are not evaluated at run time
    from typing_extensions import Self


@dataclass(frozen=True)
class EngineArgs:
    """What a launch command sets explicitly, under the engine's own field names, with the environment
    prefix and the flags no table knows. Each engine's args (vLLM's ServeArgs, SGLang's LaunchArgs) is one."""

    model: str | None
    values: Mapping[str, Any]
    env: Mapping[str, str] = field(default_factory=dict)
    unknown_flags: tuple[str, ...] = ()

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def with_values(self, **changes: Any) -> Self:
        return replace(self, values={**self.values, **changes})

    def merged_with(self, other: Self) -> Self:
        """`other` over this one: its model and values win; the environment and unknown flags of both."""
        return replace(
            self,
            model=other.model or self.model,
            values={**self.values, **other.values},
            env={**self.env, **other.env},
            unknown_flags=self.unknown_flags + other.unknown_flags,
        )


# `KEY=value` before the launcher is an environment variable (VLLM_*, SGLANG_*, CUDA_VISIBLE_DEVICES ...).
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Integers beyond this are no setting of any engine (and would overflow the arithmetic downstream).
LARGEST_INT = 1 << 50


def split_command(command: Sequence[str] | str) -> list[str]:
    """A command as pasted (one string, `\\` line continuations) or as argv -> argv."""
    check_command_type(command)
    if isinstance(command, str):
        try:
            return shlex.split(command.replace("\\\n", " "))
        except ValueError as err:
            raise ConfigError(f"cannot split the command line: {err}") from None
    return [a for a in command if a not in ("\\", "\n")]


def take_env(argv: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """Leading `env` and `KEY=value` words -> (environment, the rest of the command)."""
    env: dict[str, str] = {}
    i = 0
    while i < len(argv) and (argv[i] == "env" or ENV_ASSIGNMENT.match(argv[i])):
        if argv[i] != "env":
            key, _, value = argv[i].partition("=")
            env[key] = value
        i += 1
    return env, list(argv[i:])


def spelled(flag: str) -> str:
    """`--max_model_len` -> `--max-model-len` (long flags only; `-tp` stays as written; a dotted sub-option
    keeps its own spelling: `--compilation_config.cudagraph_mode` ->
    `--compilation-config.cudagraph_mode`)."""
    if not flag.startswith("--"):
        return flag
    head, dot, sub = flag.partition(".")
    return "--" + head[2:].replace("_", "-") + dot + sub


@dataclass(frozen=True)
class Token:
    """One item of a command: a positional word, or a flag with its value (None for a switch)."""

    name: str  # the flag as the table spells it (`--max-model-len`), or the positional word
    value: str | None
    raw: str  # as the user wrote it, value included (for notes about flags not modelled)
    positional: bool = False
    known: bool = True


# A table's answer for a flag: True takes a value, False is a switch, None is a flag it does not know.
TakesValue = Callable[[str], "bool | None"]


def tokenize(words: Sequence[str], takes_value: TakesValue) -> list[Token]:
    """Flags and positional words in order. A flag the table does not know keeps a following word that is
    not a flag as its value (`--foo bar`), so the value is not read as a model."""
    out: list[Token] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or word == "-":
            out.append(Token(word, None, word, positional=True))
            continue
        head, has_inline, inline = word.partition("=")
        name = spelled(head)
        takes = takes_value(name)
        if takes is None:
            if not has_inline and i < len(words) and not words[i].startswith("-"):
                out.append(Token(name, words[i], f"{word} {words[i]}", known=False))
                i += 1
            else:
                out.append(Token(name, inline if has_inline else None, word, known=False))
            continue
        if not takes:
            out.append(Token(name, inline if has_inline else None, word))
            continue
        if not has_inline:
            if i >= len(words):
                raise ConfigError(f"{head} needs a value")
            inline, i = words[i], i + 1
        out.append(Token(name, inline, f"{word}" if has_inline else f"{word} {inline}"))
    return out


# ---------------------------------------------------------------------------------------------------------
# Value readers: (flag, text) -> value, one line naming the flag when the text is not one
# ---------------------------------------------------------------------------------------------------------


def read_int(flag: str, text: str) -> int:
    """A whole number as argparse's `type=int` reads it (`1_000` yes, `1e3` and `2.0` no)."""
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{flag} expects an integer, got {text!r}") from None
    if abs(value) > LARGEST_INT:
        raise ConfigError(f"{flag} {text} is out of range")
    return value


def read_float(flag: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{flag} expects a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{flag} expects a finite number, got {text!r}")
    return value


def read_fraction(flag: str, text: str) -> float:
    value = read_float(flag, text)
    if not 0 < value <= 1:
        raise ConfigError(f"{flag} must be in (0, 1], got {text!r}")
    return value


def read_str(_flag: str, text: str) -> str:
    return text


def read_bool(flag: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{flag} expects true or false, got {text!r}")


def read_json(_flag: str, text: str) -> Any:
    """A JSON value; text that is not JSON is kept as written (vLLM also takes dotted `key=value` lists)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
    except RecursionError:
        raise ConfigError(f"{_flag}: JSON nested too deeply") from None


def at_least_one(read: Callable[[str, str], int]) -> Callable[[str, str], int]:
    """Counts an engine cannot run with zero or fewer of (sequences, batched tokens)."""

    def checked(flag: str, text: str) -> int:
        value = read(flag, text)
        if value < 1:
            raise ConfigError(f"{flag} must be >= 1, got {text!r}")
        return value

    return checked
