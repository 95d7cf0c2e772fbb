"""What a line parser declares so that a large log can be read without handing it every line.

A parser acts on few kinds of lines. It names them in `TRIGGERS`: substrings at least one of which a line
holds whenever the parser, not `busy()`, would do anything with it (emit a fact or change its state). The
fast reader (gated.py) scans megabytes at a time for every parser's triggers at once and hands the parsers
only
the lines that hold one, plus every line while some parser is busy (inside a multi-line block such as an
nvidia-smi table). The full read hands every line to every parser; tests hold the two readers equal on every
real report, so a format added to a parser without its trigger fails there.

A `Series` is a periodic line (vLLM's engine stats line) that a log holds hundreds of thousands of times and
that yields one fact each. The fast reader counts those lines in bulk (a regex over the buffer, in C) and
parses only the ones the evidence store keeps (the first of the document, the last ones of each buffer).
"""

from __future__ import annotations

from dataclasses import dataclass

from oomguard.diagnosis.evidence import Fact


@dataclass(frozen=True)
class Triggers:
    """Substrings (`words` case-sensitive, `caseless` not) at least one of which a line holds for the parser
    to
    act on it while it is not busy."""

    words: tuple[str, ...]
    caseless: tuple[str, ...] = ()
    # Substrings that count only at the end of a line (before trailing blanks): "|" ends every row of an
    # nvidia-smi table, while as a substring it is in every line of a docker compose log.
    line_ends: tuple[str, ...] = ()


@dataclass(frozen=True)
class Series:
    """A periodic line counted in bulk.

    `marker` is a trigger word of the parser that every line of the series holds once. `shape` is a regex
    (bytes, Python and Hyperscan syntax) that matches from the marker to the end of the line (`[^\\n]*`), such
    that a line holding one match, and no other trigger of any parser, yields exactly one fact of `fact` from
    this
    parser and nothing else, except on the first series line of a document (always parsed). `quiet` are
    trigger words that series lines also hold and that the parser ignores once the
    first series line was parsed (vLLM's 'serving' markers)."""

    marker: str
    shape: bytes
    fact: type[Fact]
    quiet: tuple[str, ...] = ()
