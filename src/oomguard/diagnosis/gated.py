"""The fast reader of large text documents: only the lines that can matter reach the parsers.

Every line parser declares its triggers (sources/triggers.py). Each chunk of megabytes is scanned for all of
them at once (Hyperscan, in C; a Python regex where Hyperscan is missing) and only the lines holding one are
split from their prefix and handed to the parsers, plus every line while a parser is busy in a block. The
periodic stats line is the one frequent line that matters: its series is matched over the chunk by one
compiled regex and counted, and only the lines the evidence store keeps are parsed (the first ones, and the
last KEEP_LAST of each chunk, which push every earlier one out of the store). The answer is the full read's:
same facts, same line numbers, same counts; a chunk where that cannot be shown cheaply (invalid UTF-8, a line
longer than MAX_LINE, a stats marker outside a well-formed stats line) is read like the full read.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType

from oomguard.diagnosis.evidence import KEEP_LAST
from oomguard.diagnosis.scan import FOLLOWING, MAX_LINE, Line, ReadStats, head_lines, lines_of_small
from oomguard.diagnosis.sources.base import Context, LineParser, split_prefix
from oomguard.diagnosis.sources.triggers import Series


def _load_hyperscan() -> ModuleType | None:
    """Hyperscan scans for a hundred words at once at GB/s; without it (no wheel for the platform) a Python
    regex does the same, slower."""
    try:
        return importlib.import_module("hyperscan")
    except ImportError:
        return None


hyperscan = _load_hyperscan()

# Notes on lines a parser could not read, at most (a garbled log would otherwise flood the report).
MAX_UNREADABLE_NOTES = 5
# A line longer than MAX_LINE spans at least one whole block of this size without a newline.
_LONG_PROBE = MAX_LINE // 2


class TriggerScan:
    """One compiled scan for a set of words: the start of every line that holds one of them."""

    def __init__(
        self,
        words: Sequence[str],
        caseless: Sequence[str],
        use_hyperscan: bool = True,
        line_ends: Sequence[str] = (),
    ) -> None:
        plain = [re.escape(w).encode() for w in words]
        folded = [re.escape(w).encode() for w in caseless]
        # A line end: the word, then only blanks (a CR of a CRLF line among them) up to the newline.
        ending = [re.escape(w).encode() + rb"[ \t\r]*$" for w in line_ends]
        exprs = plain + folded + ending
        self._regex: re.Pattern[bytes] | None = None
        self._db = None
        if not exprs:
            return
        if hyperscan is not None and use_hyperscan:
            flags = [0] * len(plain) + [hyperscan.HS_FLAG_CASELESS] * len(folded)
            flags += [hyperscan.HS_FLAG_MULTILINE] * len(ending)
            self._db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            self._db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs), flags=flags)
        else:
            alternatives = plain + [b"(?i:" + e + b")" for e in folded] + [b"(?m:" + e + b")" for e in ending]
            self._regex = re.compile(b"|".join(alternatives))

    def line_starts(self, data: bytes, start: int, end: int) -> list[int]:
        """Starts (offsets in `data`) of the lines within [start, end) holding a word, in order."""
        starts: list[int] = []
        if self._db is not None:
            last_end = -1
            view = data if (start, end) == (0, len(data)) else data[start:end]

            def on_match(_id: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
                nonlocal last_end
                to += start
                if to <= last_end:
                    return
                line_start = data.rfind(b"\n", 0, to) + 1
                line_end = data.find(b"\n", to)
                starts.append(line_start)
                last_end = len(data) if line_end < 0 else line_end

            self._db.scan(view, match_event_handler=on_match)
        elif self._regex is not None:
            pos = start
            while True:
                m = self._regex.search(data, pos, end)
                if m is None:
                    break
                starts.append(data.rfind(b"\n", 0, m.start()) + 1)
                nl = data.find(b"\n", m.end())
                if nl < 0:
                    break
                pos = nl + 1
        return starts


@lru_cache(maxsize=64)
def compiled_scan(
    words: tuple[str, ...], caseless: tuple[str, ...], use_hyperscan: bool, line_ends: tuple[str, ...]
) -> TriggerScan:
    """The scan for a set of words, compiled once per process: compiling the Hyperscan database takes ~0.1 s,
    longer than reading a pasted report, and every document read with the same parsers needs the same few
    scans. (A scan holds no state between calls; parallel reading forks processes, so none is shared across
    threads.)"""
    return TriggerScan(words, caseless, use_hyperscan, line_ends)


@dataclass
class _SeriesState:
    series: Series
    owner: LineParser
    marker: bytes
    shape: re.Pattern[bytes]
    counter: re.Pattern[bytes]  # every marker: well-formed lines give b" " (no copy), others b""
    started: bool = False  # its first line was parsed: its quiet words are no-ops from here on


def _series_state(series: Series, owner: LineParser) -> _SeriesState:
    marker = re.escape(series.marker).encode()
    if not series.shape.startswith(marker):
        raise ValueError(f"a series shape starts with its marker: {series.shape!r}")
    # One pass finds every marker: one that starts a well-formed line (which it then consumes to its end, with
    # any further marker in it) captures the next byte, a one-byte string Python does not copy; any other
    # captures nothing.
    counter = re.compile(marker + b"(?:(?=(.))" + series.shape[len(marker) :] + b"|)")
    return _SeriesState(series, owner, series.marker.encode(), re.compile(series.shape), counter)


# Line numbers inside a surveyed chunk are found from the newline count at each boundary of blocks this size.
_INDEX_BLOCK = 1 << 18


@dataclass(frozen=True)
class SurveyPlan:
    """What surveying a chunk needs: the reader's one series (or none) and its trigger scans."""

    series: _SeriesState | None
    steady: TriggerScan  # every trigger word once the series has started (all of them if there is none)
    quiet: TriggerScan | None  # the series' quiet words, triggers until its first line


@dataclass(frozen=True)
class ChunkSurvey:
    """What a chunk holds that does not depend on the parsers' state, so that it can be worked out ahead,
    in another process, while the reader feeds the chunk before (parallel_read.py)."""

    plain: bool
    lines: int
    newlines: tuple[int, ...]  # newlines before each _INDEX_BLOCK boundary
    count: int  # the series' markers, as the reader counts them
    bulk: bool  # every marker in a well-formed line of the series
    steady: tuple[int, ...]  # starts of the lines holding a steady trigger word
    quiet: tuple[int, ...]  # ... a quiet word, up to the end of the chunk's first series line
    first_series: int | None  # start of the chunk's first series line


def survey(plan: SurveyPlan, chunk: bytes) -> ChunkSurvey:
    """The state-free part of reading a chunk (the costly part: every byte is looked at here)."""
    newlines: list[int] = []
    total = 0
    for block in range(0, len(chunk), _INDEX_BLOCK):
        newlines.append(total)
        total += chunk.count(b"\n", block, block + _INDEX_BLOCK)
    lines = total + (0 if chunk.endswith(b"\n") else 1)
    if not _plain(chunk):
        return ChunkSurvey(False, lines, tuple(newlines), 0, False, (), (), None)
    count, bulk, first, quiet_end = 0, False, None, len(chunk)
    if plan.series is not None:
        found = plan.series.counter.findall(chunk)
        count, bulk = len(found), b"" not in found
        m = plan.series.shape.search(chunk)
        if m is not None:
            first = chunk.rfind(b"\n", 0, m.start()) + 1
            end = chunk.find(b"\n", m.start())
            quiet_end = len(chunk) if end < 0 else end + 1
    steady = plan.steady.line_starts(chunk, 0, len(chunk))
    quiet = plan.quiet.line_starts(chunk, 0, quiet_end) if plan.quiet is not None else []
    return ChunkSurvey(True, lines, tuple(newlines), count, bulk, tuple(steady), tuple(quiet), first)


def feed_line(ctx: Context, parsers: Sequence[LineParser], line: Line) -> None:
    """One line, split from its prefix, to the parsers."""
    msg = split_prefix(line.text)
    ctx.time = msg.time
    for parser in parsers:
        try:
            parser.feed(line, msg)
        except ValueError as err:  # a garbled number its pattern let through ("usage: 9.5.3%"): skip the line
            if len(ctx.skipped) < MAX_UNREADABLE_NOTES:
                ctx.skipped.append(f"line {line.no}: not read ({err})")


class GatedReader:
    """Feeds one document's parsers the lines that can matter, chunk by chunk."""

    def __init__(self, ctx: Context, parsers: Sequence[LineParser], use_hyperscan: bool = True) -> None:
        self.ctx = ctx
        self.parsers = parsers
        self.use_hyperscan = use_hyperscan
        self.series = [_series_state(s, p) for p in parsers for s in type(p).SERIES]
        self._scans: dict[frozenset[int], TriggerScan] = {}
        self.next_no = 1  # the number of the next chunk's first line

    def survey_plan(self) -> SurveyPlan | None:
        """The plan for surveying chunks ahead (None for a reader with several series, which this does not
        cover: it reads as before)."""
        if len(self.series) > 1:
            return None
        everything = frozenset(range(len(self.series)))
        series = self.series[0] if self.series else None
        quiet = None
        if series is not None:
            words = set(self._words(frozenset())[0]) - set(self._words(everything)[0])
            quiet = TriggerScan(sorted(words), [], self.use_hyperscan)
        return SurveyPlan(series, self._scan(everything), quiet)

    def _words(self, started: frozenset[int]) -> tuple[list[str], list[str], list[str]]:
        """The trigger words (case-sensitive, caseless, line ends) while the series in `started` have
        started."""
        markers = {s.series.marker for s in self.series}
        quiet = {w for i in started for w in self.series[i].series.quiet}
        owners: dict[str, int] = {}
        for p in self.parsers:
            for w in set(type(p).TRIGGERS.words):
                owners[w] = owners.get(w, 0) + 1
        quiet = {w for w in quiet if owners.get(w, 0) <= 1}
        words: list[str] = []
        caseless: list[str] = []
        line_ends: list[str] = []
        for p in self.parsers:
            words += [w for w in type(p).TRIGGERS.words if w not in markers and w not in quiet]
            caseless += list(type(p).TRIGGERS.caseless)
            line_ends += list(type(p).TRIGGERS.line_ends)
        return sorted(set(words)), sorted(set(caseless)), sorted(set(line_ends))

    def _scan(self, started: frozenset[int] | None = None) -> TriggerScan:
        """The trigger scan while the series in `started` (default: those that have) have started: every
        parser's words but the series markers (counted on their own) and the quiet words of the series
        already started (unless another parser needs them)."""
        if started is None:
            started = frozenset(i for i, s in enumerate(self.series) if s.started)
        scan = self._scans.get(started)
        if scan is None:
            words, caseless, line_ends = self._words(started)
            scan = self._scans[started] = compiled_scan(
                tuple(words), tuple(caseless), self.use_hyperscan and hyperscan is not None, tuple(line_ends)
            )
        return scan

    def read_chunk(
        self,
        chunk: bytes,
        lookahead: tuple[bytes, ...],
        stats: ReadStats,
        last: bool,
        surveyed: ChunkSurvey | None = None,
    ) -> None:
        """Feed the chunk's lines that matter; `surveyed` is the chunk's survey when it was worked out ahead
        (the result is the same either way)."""
        if not (surveyed.plain if surveyed is not None else _plain(chunk)):
            self._read_every_line(chunk, lookahead, stats)
            return
        if surveyed is not None:
            counts, bulk = [surveyed.count] * len(self.series), [surveyed.bulk] * len(self.series)
            hits = self._surveyed_starts(surveyed)
        else:
            found = [s.counter.findall(chunk) for s in self.series]
            counts = [len(f) for f in found]
            bulk = [b"" not in f for f in found]  # every marker in a well-formed series line
            del found
            hits = self._trigger_starts(chunk)
        fed_series = [0] * len(self.series)
        # Series lines holding no other trigger go to their own parser only (the others ignore such lines).
        owner_only: dict[int, LineParser] = {}
        for i, s in enumerate(self.series):
            for start in self._series_starts(chunk, s, bulk[i]):
                owner_only.setdefault(start, s.owner)
        for start in hits:
            owner_only.pop(start, None)
        if any(p.busy() for p in self.parsers):  # a block that began in the chunk before goes on here
            hits.append(0)
            owner_only.pop(0, None)
        starts = sorted(set(hits).union(owner_only))
        no, pos = self.next_no, 0
        fed_until = -1  # lines before this offset were already fed (a busy parser's block)
        for start in starts:
            if start < fed_until:
                continue
            if surveyed is not None and start - pos > _INDEX_BLOCK:
                no = self.next_no + _line_index(chunk, surveyed, start)
            else:
                no += chunk.count(b"\n", pos, start)
            pos = start
            while True:
                end = chunk.find(b"\n", pos)
                if end < 0:
                    end = len(chunk)
                raw = chunk[pos:end]
                for i, s in enumerate(self.series):
                    if bulk[i] and s.marker in raw:
                        fed_series[i] += 1
                owner = owner_only.get(pos)
                self._feed(raw, no, _following(chunk, end, lookahead), [owner] if owner else self.parsers)
                for s in self.series:
                    if not s.started and s.shape.search(raw[:MAX_LINE]) is not None:
                        s.started = True
                if end >= len(chunk) or not any(p.busy() for p in self.parsers):
                    break
                owner_only.pop(end + 1, None)
                pos, no = end + 1, no + 1
            fed_until = end + 1
        for i, s in enumerate(self.series):
            skipped = counts[i] - fed_series[i]
            if bulk[i] and skipped > 0:
                self.ctx.evidence.skip(s.series.fact, skipped)
                self.ctx.facts += skipped
        if surveyed is not None:
            lines = surveyed.lines
        else:
            lines = no - self.next_no + chunk.count(b"\n", pos) + (0 if chunk.endswith(b"\n") else 1)
        stats.lines += lines
        self.next_no += lines

    def _surveyed_starts(self, surveyed: ChunkSurvey) -> list[int]:
        """_trigger_starts from the survey: the quiet words count up to the series' first line."""
        if not self.series or self.series[0].started:
            return list(surveyed.steady)
        starts = set(surveyed.steady).union(surveyed.quiet)
        if surveyed.first_series is not None:
            starts.add(surveyed.first_series)  # the series' first line is always parsed
            self.series[0].started = True
        return sorted(starts)

    def _trigger_starts(self, chunk: bytes) -> list[int]:
        """Lines holding a trigger; a series starting in this chunk quiets its words after its first line."""
        starts: list[int] = []
        pos = 0
        while True:
            first = None
            for s in self.series:
                if not s.started:
                    m = s.shape.search(chunk, pos)
                    if m is not None and (first is None or m.start() < first[1]):
                        first = (s, m.start())
            if first is None:
                starts += self._scan().line_starts(chunk, pos, len(chunk))
                return starts
            s, at = first
            end = chunk.find(b"\n", at)
            end = len(chunk) if end < 0 else end + 1
            starts += self._scan().line_starts(chunk, pos, end)
            starts.append(chunk.rfind(b"\n", 0, at) + 1)  # the series' first line is always parsed
            s.started = True
            pos = end
            if pos >= len(chunk):
                return starts

    def _series_starts(self, chunk: bytes, s: _SeriesState, bulk: bool) -> list[int]:
        """The series lines to parse: all when the chunk's markers are not all in well-formed lines; else the
        first ones while the store keeps the first of their kind, and the last KEEP_LAST."""
        find, rfind, marker = chunk.find, chunk.rfind, s.marker
        positions: list[int] = []
        if not bulk:
            pos = find(marker)
            while pos >= 0:
                positions.append(pos)
                pos = find(marker, pos + 1)
        else:
            room = self.ctx.evidence.room_first(s.series.fact)
            pos = find(marker)
            while pos >= 0 and len(positions) < room:
                positions.append(pos)
                pos = find(marker, pos + 1)
            pos, last = len(chunk), 0
            while last < KEEP_LAST:
                pos = rfind(marker, 0, pos)
                if pos < 0:
                    break
                positions.append(pos)
                last += 1
        return [rfind(b"\n", 0, p) + 1 for p in positions]

    def _feed(self, raw: bytes, no: int, after: tuple[bytes, ...], parsers: Sequence[LineParser]) -> None:
        text = raw.rstrip(b"\r").decode("utf-8", "replace")
        feed_line(self.ctx, parsers, Line(no, text, after))

    def _read_every_line(self, chunk: bytes, lookahead: tuple[bytes, ...], stats: ReadStats) -> None:
        before = stats.lines
        for line in lines_of_small(chunk, stats, self.next_no, lookahead):
            feed_line(self.ctx, self.parsers, line)
            for s in self.series:
                if not s.started and s.marker.decode() in line.text and s.shape.search(line.text.encode()):
                    s.started = True
        self.next_no += stats.lines - before


def _line_index(chunk: bytes, surveyed: ChunkSurvey, pos: int) -> int:
    """Newlines in the chunk before `pos`, from the survey's block index."""
    block = pos // _INDEX_BLOCK
    return surveyed.newlines[block] + chunk.count(b"\n", block * _INDEX_BLOCK, pos)


def _plain(chunk: bytes) -> bool:
    """Valid UTF-8 and no line longer than MAX_LINE: the fast reader's line texts and counts are the full
    read's."""
    if not chunk.isascii():
        try:
            chunk.decode("utf-8")
        except UnicodeDecodeError:
            return False
    if len(chunk) > MAX_LINE:
        for block in range(0, len(chunk) - _LONG_PROBE + 1, _LONG_PROBE):
            if chunk.find(b"\n", block, block + _LONG_PROBE) < 0:
                return False
    return True


def _following(chunk: bytes, end: int, lookahead: tuple[bytes, ...]) -> tuple[bytes, ...]:
    after: list[bytes] = []
    pos = end + 1
    while len(after) < FOLLOWING and pos < len(chunk):
        nxt = chunk.find(b"\n", pos)
        if nxt < 0:
            nxt = len(chunk)
        after.append(chunk[pos : min(nxt, pos + MAX_LINE)])
        pos = nxt + 1
    if len(after) < FOLLOWING:
        after += lookahead[: FOLLOWING - len(after)]
    return tuple(after)


def read_gated(
    reader: GatedReader, chunks: Iterator[bytes], stats: ReadStats, on_chunk: Callable[[int], None]
) -> None:
    """Every chunk through the reader, each with the next chunk's first lines as lookahead."""
    pending: bytes | None = None
    for chunk in chunks:
        if pending is not None:
            reader.read_chunk(pending, head_lines(chunk), stats, False)
            on_chunk(stats.bytes)
        pending = chunk
    if pending is not None:
        reader.read_chunk(pending, (), stats, True)
        on_chunk(stats.bytes)
