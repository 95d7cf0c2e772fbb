"""A parser of the Prometheus text exposition format (0.0.4), tolerant of OpenMetrics 1.0 text.

What `/metrics` of vLLM (prometheus_client) serves, line by line:
    # HELP vllm:num_requests_waiting Number of requests waiting to be processed.
    # TYPE vllm:num_requests_waiting gauge
    vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
    vllm:time_to_first_token_seconds_bucket{le="+Inf",...} 12.0 1718000000000

Format facts (prometheus.io "Exposition formats"): a sample is `name[{label="value",...}] value
[timestamp_ms]`;
label values escape `\\`, `\"` and `\n`; HELP text escapes `\\` and `\n`; values may be `NaN`, `+Inf`, `-Inf`;
the last line must end with a newline, so a body without one was cut short and its last line is not trusted.
OpenMetrics adds `# EOF`, `# UNIT` and exemplars (` # {...} value`), which are accepted and ignored.

A line that cannot be read is skipped and reported (`SkippedLine`), never guessed at: one bad line in a
scrape should cost that line, not the other thousand. `parse_strict` turns any skipped line into an error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from oomguard.errors import InputFormatError

METRIC_TYPES = (
    "counter",
    "gauge",
    "histogram",
    "summary",
    "untyped",
    "info",
    "stateset",
    "gaugehistogram",
    "unknown",
)

# Suffixes under which a typed family's samples appear (Prometheus and OpenMetrics conventions).
_FAMILY_SUFFIXES = ("_bucket", "_sum", "_count", "_created", "_total", "_info", "_gcount", "_gsum")

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})\s*(?:\{{(.*)\}})?\s*([^\s{{}}]+)(?:\s+(-?[0-9]+))?\s*$")
# The value as an unrolled loop (runs of plain characters between escapes): `(?:[^"\\]|\\.)*` keeps a
# backtracking frame per character, about 170 bytes of memory per byte of a long label value.
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"\\]*(?:\\.[^"\\]*)*)"\s*(?:,|$)')
_EXEMPLAR = re.compile(r"\s#\s*\{")
_UNESCAPE = re.compile(r"\\(.)")
_LABEL_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}

# vLLM's longest lines (histogram buckets with every label) are a few hundred bytes; a line this long is
# skipped unread rather than parsed (memory and time stay bounded by the body limit, not the line).
MAX_LINE_BYTES = 64 << 10

# The reason given for a body's last line when no newline ends it (a scrape cut short).
CUT_SHORT = "body ends without a newline: last line was cut short"

# Go's strconv.ParseFloat (what Prometheus uses) accepts these spellings besides ordinary numbers.
_SPECIAL_VALUES = {"nan": math.nan, "+inf": math.inf, "inf": math.inf, "-inf": -math.inf}


@dataclass(frozen=True, slots=True)
class PromSample:
    """One exposed sample: `name{labels} value [timestamp]`; labels sorted by name."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    timestamp_ms: int | None = None
    lineno: int = 0  # where in the body (from 1), for messages that point at a line

    def label(self, key: str, default: str = "") -> str:
        for name, value in self.labels:
            if name == key:
                return value
        return default


@dataclass(frozen=True)
class MetricFamily:
    """A family: its TYPE and HELP (when declared) and its samples (e.g. a histogram's
    _bucket/_sum/_count)."""

    name: str
    type: str
    help: str
    samples: tuple[PromSample, ...]


@dataclass(frozen=True)
class SkippedLine:
    """A line that was not read, with why; `lineno` counts from 1."""

    lineno: int
    reason: str
    text: str


@dataclass(frozen=True)
class Exposition:
    """A parsed scrape body: families in order of appearance, what was skipped, whether the body was cut."""

    families: tuple[MetricFamily, ...]
    skipped: tuple[SkippedLine, ...]
    truncated: bool

    @property
    def num_samples(self) -> int:
        return sum(len(family.samples) for family in self.families)

    def samples(self) -> tuple[PromSample, ...]:
        return tuple(sample for family in self.families for sample in family.samples)

    def family(self, name: str) -> MetricFamily | None:
        for family in self.families:
            if family.name == name:
                return family
        return None


class _Builder:
    """Collects samples into families while walking the lines once."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.types: dict[str, str] = {}
        self.helps: dict[str, str] = {}
        self.samples: dict[str, list[PromSample]] = {}
        self.current: str | None = None

    def declare(self, name: str) -> None:
        if name not in self.samples:
            self.samples[name] = []
            self.order.append(name)
        self.current = name

    def family_of(self, sample_name: str) -> str:
        current = self.current
        if current is not None and (
            sample_name == current
            or (sample_name.startswith(current) and sample_name[len(current) :] in _FAMILY_SUFFIXES)
        ):
            return current
        # prometheus_client declares counters as `x_total` and exposes `x_created` beside them.
        if current is not None and current.endswith("_total") and sample_name == current[:-6] + "_created":
            return current
        if sample_name not in self.samples:
            self.declare(sample_name)
            self.current = current  # an undeclared sample does not open a family for what follows
        return sample_name

    def build(self) -> tuple[MetricFamily, ...]:
        return tuple(
            MetricFamily(
                name, self.types.get(name, "untyped"), self.helps.get(name, ""), tuple(self.samples[name])
            )
            for name in self.order
        )


def _unescape_help(text: str) -> str:
    return _UNESCAPE.sub(lambda m: {"\\": "\\", "n": "\n"}.get(m.group(1), m.group(0)), text)


def _unescape_label(text: str) -> str:
    return _UNESCAPE.sub(lambda m: _LABEL_ESCAPES.get(m.group(1), m.group(0)), text)


def parse_value(text: str) -> float:
    """A sample value as Prometheus reads it; ValueError when it is not a number."""
    special = _SPECIAL_VALUES.get(text.lower())
    if special is not None:
        return special
    if not text or text[-1] not in "0123456789.":
        raise ValueError(text)  # float() would accept 'infinity' and '1_0'; Prometheus would not
    if "_" in text:
        raise ValueError(text)
    return float(text)


def _parse_labels(body: str) -> tuple[tuple[str, str], ...]:
    labels: dict[str, str] = {}
    pos = 0
    body = body.rstrip()
    while pos < len(body):
        match = _LABEL.match(body, pos)
        if match is None:
            raise ValueError(f"bad label syntax at {body[pos : pos + 30]!r}")
        name = match.group(1)
        if name in labels:
            raise ValueError(f"label {name!r} given twice")
        labels[name] = _unescape_label(match.group(2))
        pos = match.end()
    return tuple(sorted(labels.items()))


# Scrapes repeat the same label sets (every engine, every bucket, every scrape): parsed once each. Bounded:
# short bodies only, and the cache starts over when full.
_LABEL_CACHE: dict[str, tuple[tuple[str, str], ...]] = {}
_LABEL_CACHE_ENTRIES = 4096
_LABEL_CACHE_BODY_CHARS = 512


def _labels_of(body: str) -> tuple[tuple[str, str], ...]:
    labels = _LABEL_CACHE.get(body)
    if labels is None:
        labels = _parse_labels(body)
        if len(body) <= _LABEL_CACHE_BODY_CHARS:
            if len(_LABEL_CACHE) >= _LABEL_CACHE_ENTRIES:
                _LABEL_CACHE.clear()
            _LABEL_CACHE[body] = labels
    return labels


def _parse_comment(line: str, builder: _Builder) -> str | None:
    """Handle a `#` line; returns a reason when it is a malformed HELP/TYPE line."""
    parts = line[1:].lstrip().split(None, 2)
    if not parts or parts[0] not in ("HELP", "TYPE", "UNIT"):
        return None  # a free comment, or OpenMetrics' `# EOF`
    if len(parts) < 2 or not re.fullmatch(_NAME, parts[1]):
        return f"{parts[0]} line without a metric name"
    keyword, name = parts[0], parts[1]
    rest = parts[2] if len(parts) > 2 else ""
    builder.declare(name)
    if keyword == "HELP":
        builder.helps[name] = _unescape_help(rest)
    elif keyword == "TYPE":
        kind = rest.strip().lower()
        if kind not in METRIC_TYPES:
            return f"unknown metric type {rest.strip()!r}"
        builder.types[name] = kind
    return None


def parse(body: bytes | str) -> Exposition:
    """Parse a whole exposition; bad lines are skipped and listed, a body cut mid-line loses that line."""
    raw = body if isinstance(body, bytes) else body.encode("utf-8", "surrogateescape")
    builder = _Builder()
    skipped: list[SkippedLine] = []
    for item in _walk((raw,), builder):
        if isinstance(item, SkippedLine):
            skipped.append(item)
        else:
            builder.samples[builder.family_of(item.name)].append(item)
    truncated = bool(raw) and not raw.endswith(b"\n")
    if truncated:
        skipped.insert(0, skipped.pop())  # the cut line first: it says the whole body is in doubt
    return Exposition(builder.build(), tuple(skipped), truncated)


def iter_exposition(chunks: Iterable[bytes]) -> Iterator[PromSample | SkippedLine]:
    """The samples and skipped lines of an exposition given as line-aligned chunks (only the last may end
    without a newline), in the order of their lines: a file of many scrapes streams in bounded memory. A
    last line without its newline is skipped as cut short, after the lines before it."""
    return _walk(chunks, _Builder())


def _walk(chunks: Iterable[bytes], builder: _Builder) -> Iterator[PromSample | SkippedLine]:
    lineno = 0
    cut = b""
    for chunk in chunks:
        if cut:  # the chunk before ended mid-line: chunks were not line-aligned
            chunk = cut + chunk
        lines = chunk.split(b"\n")
        cut = lines.pop()  # b"" after a final newline, else the line still open
        for raw_line in lines:
            lineno += 1
            item = _read_line(raw_line, lineno, builder)
            if item is not None:
                yield item
    if cut:
        yield SkippedLine(lineno + 1, CUT_SHORT, cut[:80].decode("utf-8", "replace"))


def _read_line(raw_line: bytes, lineno: int, builder: _Builder) -> PromSample | SkippedLine | None:
    """One line: a sample, a skipped line, or None (blank, a comment, HELP/TYPE taken by `builder`)."""
    if len(raw_line) > MAX_LINE_BYTES:
        return SkippedLine(
            lineno, f"line longer than {MAX_LINE_BYTES >> 10} KiB", raw_line[:80].decode("utf-8", "replace")
        )
    try:
        line = raw_line.decode("utf-8")
    except UnicodeDecodeError:
        return SkippedLine(lineno, "not valid UTF-8", raw_line[:80].decode("utf-8", "replace"))
    line = line.strip()
    if not line:
        return None
    if line[0] == "#":
        reason = _parse_comment(line, builder)
        return SkippedLine(lineno, reason, line[:80]) if reason else None
    sample = _parse_sample_line(line, lineno)
    return SkippedLine(lineno, sample, line[:80]) if isinstance(sample, str) else sample


def _parse_sample_line(line: str, lineno: int) -> PromSample | str:
    """The sample of a line, or why it is not one."""
    exemplar = _EXEMPLAR.search(line)
    if exemplar is not None:
        line = line[: exemplar.start()]  # OpenMetrics exemplar: not a sample of ours
    match = _SAMPLE.match(line)
    if match is None:
        return "not a sample line (name{labels} value [timestamp])"
    name, label_body, value_text, ts_text = match.groups()
    try:
        labels = _labels_of(label_body) if label_body else ()
    except ValueError as err:
        return str(err)
    try:
        value = parse_value(value_text)
    except ValueError:
        return f"value {value_text!r} is not a number"
    return PromSample(name, labels, value, int(ts_text) if ts_text is not None else None, lineno)


def parse_strict(body: bytes | str) -> Exposition:
    """Parse, raising InputFormatError at the first line that cannot be read (for files a user hands us)."""
    exposition = parse(body)
    if exposition.skipped:
        first = exposition.skipped[0]
        raise InputFormatError(f"metrics text line {first.lineno}: {first.reason}: {first.text!r}")
    return exposition
