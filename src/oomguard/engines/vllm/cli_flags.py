"""Which flags `vllm serve` accepts, as its own argparse parser decides: what vLLM would refuse at startup.

The list is vLLM 0.33.0's own parser, dumped from vllm/entrypoints/openai/cli_args.py (make_arg_parser) and
vllm/engine/arg_utils.py (AsyncEngineArgs.add_cli_args) into `data/serve_flags_0.33.json`. Its rules, from
vLLM's FlexibleArgumentParser (vllm/utils/argparse_utils.py) and argparse:

- underscores in a long flag become dashes (`--tensor_parallel_size` is `--tensor-parallel-size`);
- a unique prefix of a long flag is that flag (allow_abbrev); an ambiguous prefix is an error;
- anything else is `vllm serve: error: unrecognized arguments: ...` and exit 2.

Flags of older versions that 0.33 dropped (`--speculative-model`, `--max-seq-len-to-capture`) are accepted
when an older `--vllm-version` is planned: oomguard's own tables know them.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from oomguard.engines.vllm.versions import Version
from oomguard.errors import ConfigError

FLAG_LIST_VERSION = Version(0, 33, 0)
FLAG_LIST_FILE = "serve_flags_0.33.json"


class RefusedFlagError(ConfigError):
    """A `vllm serve` command that vLLM's argument parser itself would refuse (it exits before any memory)."""


@dataclass(frozen=True)
class FlagInfo:
    dest: str
    takes_value: bool


@lru_cache(maxsize=1)
def vllm_flags() -> dict[str, FlagInfo]:
    """Every option string of vLLM 0.33's `vllm serve` parser -> its destination and whether it takes a
    value."""
    text = resources.files("oomguard.engines.vllm").joinpath("data", FLAG_LIST_FILE).read_text("utf-8")
    raw = json.loads(text)["flags"]
    return {name: FlagInfo(str(item["dest"]), bool(item["takes_value"])) for name, item in raw.items()}


def normalize(name: str) -> str:
    """FlexibleArgumentParser: underscores become dashes in a long flag's name, up to its first '.'."""
    if not name.startswith("--"):
        return name
    head, dot, tail = name.partition(".")
    return head.replace("_", "-") + dot + tail


def _negated_base(name: str, known: dict[str, FlagInfo]) -> str | None:
    """`--no-enable-prefix-caching`: BooleanOptionalAction's negative form of a switch."""
    if name.startswith("--no-"):
        base = "--" + name[5:]
        info = known.get(base)
        if info is not None and not info.takes_value:
            return base
    return None


def resolve(name: str, extra: Iterable[str] = ()) -> str:
    """The option vLLM's parser reads `name` as (exact, negated switch, or unique prefix); raises
    RefusedFlagError for an unknown or ambiguous one. `extra`: more accepted names (older versions' flags)."""
    known = vllm_flags()
    others = set(extra)
    if name in known or name in others or _negated_base(name, known):
        return name
    if name.startswith("--") and len(name) > 2:
        matches = sorted(
            {flag for flag in (*known, *others) if flag.startswith("--") and flag.startswith(name)}
        )
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise RefusedFlagError(
                f"vLLM would refuse this command: ambiguous option: {name} could match "
                f"{', '.join(matches[:6])}{' ...' if len(matches) > 6 else ''}"
            )
    raise RefusedFlagError(f"vLLM would refuse this command: unrecognized arguments: {name}{hint(name)}")


def hint(name: str, extra: Iterable[str] = ()) -> str:
    """' (did you mean --max-model-len?)' from the closest real flag names, or ''."""
    choices = [*vllm_flags(), *extra]
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    if not close:
        # A typo that shares the words but not their order or length (--gpu-mem-util ->
        # --gpu-memory-utilization).
        words = [w for w in name.lstrip("-").split("-") if w]
        scored = [(sum(w in c for w in words), c) for c in choices if c.startswith("--")]
        best = max(scored, default=(0, ""))
        if words and best[0] >= max(2, len(words) - 1):
            close = [best[1]]
    return f" (did you mean {close[0]}?)" if close else ""


def takes_value(name: str) -> bool | None:
    info = vllm_flags().get(name)
    return info.takes_value if info else None


def refusal_message(refused: Iterable[str], version: str = "") -> str:
    """vLLM's parser error for what it does not know, each with the closest real flag."""
    parts = []
    for item in refused:
        words = item.split()
        if not words:  # an empty argument ('') is refused as itself
            parts.append(repr(item))
            continue
        name = words[0].split("=")[0].rstrip(":")
        parts.append(item if "(" in item or not name.startswith("-") else item + hint(name))
    who = f"vLLM {version}" if version else "vLLM"
    return f"{who} would refuse this command: unrecognized arguments: {'; '.join(parts)}"
