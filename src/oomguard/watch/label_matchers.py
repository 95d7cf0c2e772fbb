"""PromQL label matchers (`job="vllm", instance=~"gpu-.*"`) read as Prometheus reads them, or refused.

`oomguard rules --selector` and `watch --prometheus --selector` put the user's matchers inside generated
PromQL; a selector Prometheus would reject must be refused here, in one line, not written into a rule file
that `promtool check rules` fails. Grammar (Prometheus' PromQL lexer): `name op value` separated by commas
(a trailing comma allowed), optionally inside braces; names `[a-zA-Z_][a-zA-Z0-9_]*`; ops `=`, `!=`, `=~`,
`!~`; values in double or single quotes with Go escapes, or backquotes raw. Regexes are RE2 (fully
anchored): Python's `re` checks the syntax, and the constructs RE2 lacks (backreferences, lookaround) are
refused.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from oomguard.errors import ConfigError

_NAME = re.compile(r"\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*")
_GO_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}
_RE2_UNSUPPORTED = re.compile(r"\(\?[=!<]|\\[1-9]")


@dataclass(frozen=True)
class Matcher:
    name: str
    op: str
    value: str

    def __str__(self) -> str:
        return f"{self.name}{self.op}{json.dumps(self.value, ensure_ascii=False)}"


def _quoted(text: str, pos: int, original: str) -> tuple[str, int]:
    quote = text[pos] if pos < len(text) else ""
    if quote not in ('"', "'", "`"):
        raise ConfigError(
            f"selector {original!r}: a label value must be quoted (at {text[pos : pos + 20]!r})"
        )
    out: list[str] = []
    i = pos + 1
    while i < len(text):
        char = text[i]
        if char == quote:
            return "".join(out), i + 1
        if char == "\n" and quote != "`":
            break
        if char == "\\" and quote != "`":
            i += 1
            if i >= len(text):
                break
            esc = text[i]
            if esc == quote:
                out.append(quote)
            elif esc in _GO_ESCAPES:
                out.append(_GO_ESCAPES[esc])
            elif esc in "xuU0123456789":
                width = {"x": 2, "u": 4, "U": 8}.get(esc, 3)
                digits = text[i + 1 : i + 1 + width] if esc in "xuU" else text[i : i + 3]
                try:
                    out.append(chr(int(digits, 16 if esc in "xuU" else 8)))
                except ValueError:
                    raise ConfigError(f"selector {original!r}: bad escape \\{esc}{digits}") from None
                i += width if esc in "xuU" else 2
            else:
                raise ConfigError(f"selector {original!r}: unknown escape \\{esc}")
        else:
            out.append(char)
        i += 1
    raise ConfigError(f"selector {original!r}: unterminated quoted string")


def parse_matchers(selector: str) -> tuple[Matcher, ...]:
    """The matchers of `selector` ('' for none); ConfigError naming what Prometheus would refuse."""
    text = selector.strip()
    if text.startswith("{") or text.endswith("}"):
        if not (text.startswith("{") and text.endswith("}")):
            raise ConfigError(f"selector {selector!r}: unbalanced braces")
        text = text[1:-1]
    matchers: list[Matcher] = []
    pos = 0
    while text[pos:].strip():
        match = _NAME.match(text, pos)
        if match is None:
            raise ConfigError(
                f'selector {selector!r} is not a list of label matchers like job="vllm" '
                f"(at {text[pos : pos + 20]!r})"
            )
        name, op = match.groups()
        value, pos = _quoted(text, match.end(), selector)
        if op in ("=~", "!~"):
            _check_regex(value, selector)
        matchers.append(Matcher(name, op, value))
        rest = text[pos:].lstrip()
        if rest and not rest.startswith(","):
            raise ConfigError(f"selector {selector!r}: expected a comma before {rest[:20]!r}")
        pos = len(text) - len(rest) + (1 if rest else 0)
    return tuple(matchers)


def _check_regex(value: str, selector: str) -> None:
    if _RE2_UNSUPPORTED.search(value):
        raise ConfigError(
            f"selector {selector!r}: {value!r} uses lookaround or a backreference (RE2 has neither)"
        )
    try:
        re.compile(value)
    except re.error as err:
        raise ConfigError(f"selector {selector!r}: {value!r} is not a regular expression ({err})") from None


def canonical(selector: str) -> str:
    """The matchers re-written the way Prometheus prints them, without braces ('' for none)."""
    return ",".join(str(m) for m in parse_matchers(selector))
