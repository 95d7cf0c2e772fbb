"""Workloads: who asks for how many tokens, and when.

Readers (the format is recognised from the file's header or first record, not its name):

- Azure LLM inference trace 2023 CSV: `TIMESTAMP,ContextTokens,GeneratedTokens`, wall-clock timestamps.
- Mooncake FAST'25 JSONL: `timestamp` (ms), `input_length`, `output_length`, `hash_ids` (one id per
  512-token prefix block; equal ids are reusable prefix KV).
- The scheduler oracle's JSONL: `id, prompt_tokens, output_tokens, arrival_step, prefix_hash_ids`; time is
  counted in engine steps, not seconds (requests arriving at the same step keep file order, as the oracle).
- Generic CSV or JSONL: an arrival column (`arrival_s`, `arrival`, `timestamp`, `time` in seconds, or
  `timestamp_ms`), `prompt_tokens`/`input_tokens`/`input_length`, `output_tokens`/`output_length`, and
  optional `prefix_ids` (JSON list, or ids separated by spaces/semicolons in CSV).

Generators: Poisson or bursty arrivals with fixed/uniform/lognormal lengths, and the agentic shape of seed
002 (one very long prompt arriving among many short multi-turn appends). Rate scaling and time windows apply
to any workload. Malformed rows raise `InputFormatError` naming file and line, or are skipped and counted.
"""

from __future__ import annotations

import codecs
import csv
import itertools
import json
import math
import random
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from oomguard.errors import InputFormatError, shown
from oomguard.inputs import open_bounded
from oomguard.simulation.trace_columns import RequestColumns, TraceRequest

STEPS = "steps"
SECONDS = "seconds"


@dataclass(frozen=True)
class Workload:
    """The requests (held as `RequestColumns`, whatever sequence they were given as), in arrival order."""

    requests: Sequence[TraceRequest]
    clock: str  # SECONDS or STEPS
    source: str
    skipped_rows: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "requests", RequestColumns.of(self.requests))

    @property
    def columns(self) -> RequestColumns:
        columns = self.requests
        assert isinstance(columns, RequestColumns)  # __post_init__
        return columns

    @property
    def arrivals(self) -> Sequence[float]:
        return self.columns.arrivals

    @property
    def duration(self) -> float:
        arrivals = self.arrivals
        return arrivals[-1] - arrivals[0] if arrivals else 0.0

    @property
    def prompt_tokens(self) -> int:
        return sum(self.columns.prompts)

    @property
    def output_tokens(self) -> int:
        return sum(self.columns.outputs)


# A trace is streamed into columns of 24 bytes a row plus 8 per prefix id: at most this much of them, so
# an endless stream of short rows (or of prefix ids) is refused at a bounded size. A real 10M-row trace
# without prefix ids takes 240 MB.
MAX_COLUMN_BYTES = 384 << 20
_BUDGET_EVERY_ROWS = 1 << 16
_MAX_COUNT = (1 << 63) - 1  # a token count the columns hold


class _Rows:
    """Collects rows into columns, turning each bad one into an error naming file and line, or a skip."""

    def __init__(self, path: str, skip_bad_rows: bool) -> None:
        self.path = path
        self.skip_bad_rows = skip_bad_rows
        self.skipped = 0
        self.columns = RequestColumns()
        self.last_arrival = 0.0

    def bad(self, line: int, why: str) -> None:
        if not self.skip_bad_rows:
            raise InputFormatError(f"{self.path}:{line}: {why} (use --skip-bad-rows to skip such rows)")
        self.skipped += 1

    def add(
        self,
        line: int,
        arrival: float,
        prompt_tokens: int,
        output_tokens: int,
        prefix_ids: Sequence[int],
        rid: str | None,
        *,
        need_sorted: bool,
    ) -> None:
        """One row (`rid` None: named by its position), checked."""
        columns = self.columns
        if prompt_tokens < 1:
            return self.bad(line, f"prompt tokens must be >= 1, got {prompt_tokens}")
        if output_tokens < 1:
            return self.bad(line, f"output tokens must be >= 1, got {output_tokens}")
        if not math.isfinite(arrival) or arrival < 0 and not need_sorted:
            return self.bad(line, f"arrival must be a finite number >= 0, got {arrival}")
        if need_sorted and columns and arrival < self.last_arrival:
            return self.bad(line, f"timestamps go backwards ({arrival:g} after {self.last_arrival:g})")
        try:
            columns.append(arrival, prompt_tokens, output_tokens, prefix_ids, rid)
        except OverflowError:
            return self.bad(line, f"token count out of range: {shown(max(prompt_tokens, output_tokens))}")
        self.last_arrival = arrival
        if len(columns) % _BUDGET_EVERY_ROWS == 0:
            self.check_budget(line)
        return None

    def check_budget(self, line: int) -> None:
        columns = self.columns
        if columns.nbytes > MAX_COLUMN_BYTES:
            raise InputFormatError(
                f"{self.path}:{line}: more than {MAX_COLUMN_BYTES >> 20} MiB of requests ({len(columns):,} "
                f"rows, {columns.num_prefix_ids:,} prefix ids); split the trace"
            )


def _int_field(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} is not a number: {shown(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                number = math.nan
            if number.is_integer():
                return int(number)
    raise ValueError(f"{name} is not a whole number: {shown(value)}")


def _float_field(value: Any, name: str) -> float:
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{name} is not a number: {shown(value)}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} is not a number: {shown(value)}") from None
    if not math.isfinite(number):
        raise ValueError(f"{name} is not finite: {shown(value)}")
    return number


def _ids_field(value: Any) -> tuple[int, ...]:
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            value = json.loads(text)
        else:
            value = [v for v in text.replace(";", " ").replace(",", " ").split() if v]
    if not isinstance(value, list):
        raise TypeError(f"prefix ids must be a list, got {type(value).__name__}")
    return tuple(_int_field(v, "prefix id") for v in value)


# A FIFO or an endless stream stops here (about 13M rows of CSV); a file is streamed, never held whole.
MAX_TRACE_BYTES = 256 << 20
_SNIFF_BYTES = 4096  # where a NUL byte says "binary"


def _not_utf8(path: str, line_no: int, err: UnicodeDecodeError) -> InputFormatError:
    return InputFormatError(f"{path}:{line_no}: not valid UTF-8 (byte 0x{err.object[err.start]:02x})")


def _text_lines(stream: Iterator[bytes], path: str) -> tuple[list[str], Iterator[str]]:
    """The lines up to the first that is not blank (a BOM dropped), and the rest, decoded as they are read
    (lines end at \n only). Readers turn a `UnicodeDecodeError` from the rest into `_not_utf8` with their
    line count."""
    head: list[str] = []
    for raw in stream:
        if not head and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8) :]
        try:
            head.append(raw.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise _not_utf8(path, len(head) + 1, err) from None
        if head[-1].strip():
            break
    return head, map(bytes.decode, stream)


# ---------------------------------------------------------------------------------------------------------
# JSONL
# ---------------------------------------------------------------------------------------------------------

_ARRIVAL_SECONDS = ("arrival_s", "arrival", "arrival_time", "timestamp_s", "time")
_PROMPT_KEYS = ("prompt_tokens", "input_tokens", "input_length", "context_tokens")
_OUTPUT_KEYS = ("output_tokens", "output_length", "generated_tokens")


def _jsonl_records(lines: Iterable[str], rows: _Rows) -> Iterator[tuple[int, dict[str, Any]]]:
    line_no = 0
    try:
        for line_no, line in enumerate(lines, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                rows.bad(line_no, f"not valid JSON ({err.msg})")
                continue
            except RecursionError:
                rows.bad(line_no, "JSON nested too deeply")
                continue
            if not isinstance(record, dict):
                rows.bad(line_no, f"expected a JSON object, got {type(record).__name__}")
                continue
            yield line_no, record
    except UnicodeDecodeError as err:
        raise _not_utf8(rows.path, line_no + 1, err) from None


def _pick(record: dict[str, Any], keys: Iterable[str]) -> str | None:
    for key in keys:
        if key in record:
            return key
    return None


def _jsonl_kind(record: dict[str, Any], path: str, line_no: int) -> str:
    """The format, from the first record's keys."""
    if "arrival_step" in record or (
        "prompt_tokens" in record and "id" in record and _pick(record, _ARRIVAL_SECONDS) is None
    ):
        return "oracle"
    if "input_length" in record and "timestamp" in record:
        return "mooncake"
    if _pick(record, _PROMPT_KEYS) and _pick(record, _OUTPUT_KEYS):
        return "generic"
    raise InputFormatError(
        f"{path}:{line_no}: unknown JSONL trace format (keys {sorted(record)[:6]}); expected "
        "Mooncake (timestamp, input_length, output_length, hash_ids), the oracle's "
        "(id, prompt_tokens, output_tokens, arrival_step) or "
        "arrival_s/prompt_tokens/output_tokens"
    )


def _read_jsonl(lines: Iterable[str], path: str, skip_bad_rows: bool) -> Workload:
    rows = _Rows(path, skip_bad_rows)
    kind: str | None = None
    for line_no, record in _jsonl_records(lines, rows):
        if kind is None:
            kind = _jsonl_kind(record, path, line_no)
        rid: str | None
        try:
            if kind == "oracle":
                rid = str(record["id"]) if "id" in record else None
                arrival = float(_int_field(record.get("arrival_step", 0), "arrival_step"))
                prompt = _int_field(record["prompt_tokens"], "prompt_tokens")
                output = _int_field(record["output_tokens"], "output_tokens")
                ids = _ids_field(record.get("prefix_hash_ids"))
            elif kind == "mooncake":
                rid = None
                arrival = _float_field(record["timestamp"], "timestamp") / 1000.0
                prompt = _int_field(record["input_length"], "input_length")
                output = _int_field(record["output_length"], "output_length")
                ids = _ids_field(record.get("hash_ids"))
            else:
                prompt_key = _pick(record, _PROMPT_KEYS)
                output_key = _pick(record, _OUTPUT_KEYS)
                if prompt_key is None or output_key is None:
                    raise KeyError(_PROMPT_KEYS[0] if prompt_key is None else _OUTPUT_KEYS[0])
                if "timestamp_ms" in record:
                    arrival = _float_field(record["timestamp_ms"], "timestamp_ms") / 1000.0
                else:
                    arrival_key = _pick(record, _ARRIVAL_SECONDS)
                    if arrival_key is None:
                        raise KeyError("arrival_s")
                    arrival = _float_field(record[arrival_key], arrival_key)
                rid = str(record["id"]) if "id" in record else None
                prompt = _int_field(record[prompt_key], prompt_key)
                output = _int_field(record[output_key], output_key)
                ids = _ids_field(record.get("prefix_ids", record.get("hash_ids")))
        except KeyError as err:
            rows.bad(line_no, f"missing field {err.args[0]!r}")
            continue
        except (ValueError, TypeError, json.JSONDecodeError) as err:
            rows.bad(line_no, str(err))
            continue
        rows.add(line_no, arrival, prompt, output, ids, rid, need_sorted=kind != "oracle")
    columns = rows.columns
    if kind == "oracle":
        seen: set[str] = set()
        for row in range(len(columns)):
            rid = columns.rid(row)
            if rid in seen:
                raise InputFormatError(f"{path}: duplicate request id {shown(rid)}")
            seen.add(rid)
        # The oracle admits requests of the same step in file order: a stable sort by step.
        arrivals = columns.arrivals
        if any(arrivals[i] > arrivals[i + 1] for i in range(len(arrivals) - 1)):
            columns = columns.take(sorted(range(len(columns)), key=arrivals.__getitem__))
        return Workload(columns, STEPS, path, rows.skipped)
    return Workload(columns, SECONDS, path, rows.skipped)


# ---------------------------------------------------------------------------------------------------------
# CSV
# ---------------------------------------------------------------------------------------------------------


def _azure_timestamp(text: str, last: dict[str, float] | None = None) -> float:
    """'2023-11-16 18:17:03.9799600' (7 fractional digits) -> POSIX seconds. `last` keeps the last whole
    second read (rows in time order share it: parsed once)."""
    text = text.strip()
    whole, _, frac = text.partition(".")
    base = last.get(whole) if last is not None else None
    if base is None:
        # Azure's traces are UTC: read in the machine's zone, a DST change would add or remove an hour
        # fromisoformat is ~40x faster than strptime; it takes only the exact 19-character form here, so an
        # offset or an unpadded field still goes through strptime (and its error).
        if len(whole) == 19 and whole[10] == " ":
            moment = datetime.fromisoformat(whole)
        else:
            moment = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S")
        base = moment.replace(tzinfo=timezone.utc).timestamp()
        if last is not None:
            last.clear()
            last[whole] = base
    fraction = float("0." + frac) if frac else 0.0
    if frac and not frac.isdigit():
        raise ValueError(f"bad fractional seconds in {shown(text)}")
    return base + fraction


def _seconds(text: str, name: str) -> float:
    try:
        number = float(text)
    except ValueError:
        return _float_field(text, name)
    return number if number - number == 0 else _float_field(text, name)  # NaN or infinite: say which


def _read_csv(lines: Iterable[str], path: str, skip_bad_rows: bool) -> Workload:
    rows = _Rows(path, skip_bad_rows)
    reader = csv.reader(lines)
    try:
        header = next(reader)
    except StopIteration:
        raise InputFormatError(f"{path}: empty trace") from None
    except csv.Error as err:
        raise InputFormatError(f"{path}:1: unreadable CSV header ({err})") from None
    names = [h.strip().lower() for h in header]
    azure = names[:3] == ["timestamp", "contexttokens", "generatedtokens"]

    def col(*candidates: str) -> int | None:
        for c in candidates:
            if c in names:
                return names.index(c)
        return None

    i_ids: int | None
    if azure:
        i_time, i_prompt, i_output, i_ids, time_scale = 0, 1, 2, None, 1.0
    else:
        prompt_col = col(*_PROMPT_KEYS)
        output_col = col(*_OUTPUT_KEYS)
        time_col = col("timestamp_ms")
        time_scale = 0.001
        if time_col is None:
            time_col = col(*_ARRIVAL_SECONDS)
            time_scale = 1.0
        i_ids = col("prefix_ids", "hash_ids")
        if prompt_col is None or output_col is None or time_col is None:
            raise InputFormatError(
                f"{path}:1: unknown CSV trace format (header {header[:6]}); expected Azure "
                "(TIMESTAMP,ContextTokens,GeneratedTokens) or "
                "arrival_s,prompt_tokens,output_tokens[,prefix_ids]"
            )
        i_time, i_prompt, i_output = time_col, prompt_col, output_col
    names_of = (header[i_time], header[i_prompt], header[i_output])
    origin: float | None = None
    last_second: dict[str, float] = {}
    width = len(names)

    def read_row(fields: list[str], line_no: int) -> None:
        """One row, in full: blank, short, Azure, prefix ids, bad values."""
        nonlocal origin
        if not fields or all(not f.strip() for f in fields):
            return
        if len(fields) < width:
            return rows.bad(line_no, f"expected {width} columns, got {len(fields)}")
        try:
            if azure:
                stamp = _azure_timestamp(fields[i_time], last_second)
                if origin is None:
                    origin = stamp
                arrival = stamp - origin
            else:
                arrival = _float_field(fields[i_time], names_of[0]) * time_scale
            request = (
                arrival,
                _int_field(fields[i_prompt], names_of[1]),
                _int_field(fields[i_output], names_of[2]),
                _ids_field(fields[i_ids]) if i_ids is not None else (),
            )
        except (ValueError, TypeError, json.JSONDecodeError) as err:
            return rows.bad(line_no, str(err))
        return rows.add(line_no, *request, None, need_sorted=True)

    try:
        if azure or i_ids is not None:
            while True:
                try:
                    fields = next(reader)
                except StopIteration:
                    break
                except csv.Error as err:
                    rows.bad(reader.line_num, f"unreadable CSV row ({err})")
                    continue
                read_row(fields, reader.line_num)
        else:
            _read_plain_csv(reader, rows, (i_time, i_prompt, i_output), time_scale, width, read_row)
    except UnicodeDecodeError as err:
        raise _not_utf8(path, reader.line_num + 1, err) from None
    return Workload(rows.columns, SECONDS, path, rows.skipped)


def _read_plain_csv(
    reader: Any,
    rows: _Rows,
    at: tuple[int, int, int],
    time_scale: float,
    width: int,
    read_row: Callable[[list[str], int], None],
) -> None:
    """Rows of three numbers (nearly every row of a large trace) straight into the columns; any other
    row, bad or blank, goes through `read_row` (the same checks and messages, one row at a time)."""
    columns = rows.columns
    assert columns.plain  # no prefix ids, no request ids: the three arrays are the whole row
    add_arrival, add_prompt, add_output = (
        columns.arrivals.append,
        columns.prompts.append,
        columns.outputs.append,
    )
    i_time, i_prompt, i_output = at
    last = -math.inf
    budget = _BUDGET_EVERY_ROWS
    while True:
        try:
            for fields in reader:
                try:
                    arrival = float(fields[i_time]) * time_scale
                    prompt = int(fields[i_prompt])
                    output = int(fields[i_output])
                except (ValueError, IndexError):
                    rows.last_arrival = last
                    read_row(fields, reader.line_num)
                    last = rows.last_arrival if columns else last
                    continue
                if (
                    arrival >= last
                    and arrival - arrival == 0  # finite
                    and 1 <= prompt <= _MAX_COUNT
                    and 1 <= output <= _MAX_COUNT
                    and len(fields) >= width
                ):
                    add_arrival(arrival)
                    add_prompt(prompt)
                    add_output(output)
                    last = arrival
                    budget -= 1
                    if not budget:
                        budget = _BUDGET_EVERY_ROWS
                        rows.last_arrival = last
                        rows.check_budget(reader.line_num)
                else:
                    rows.last_arrival = last
                    read_row(fields, reader.line_num)
                    last = rows.last_arrival if columns else last
            return
        except csv.Error as err:
            rows.bad(reader.line_num, f"unreadable CSV row ({err})")


def read_workload(path: str | Path, *, skip_bad_rows: bool = False) -> Workload:
    """Read a trace file in any supported format (see the module docstring), streaming it into columns."""
    p = Path(path)
    with open_bounded(p, limit=MAX_TRACE_BYTES, what="trace", error=InputFormatError) as stream:
        if b"\x00" in stream.peek(_SNIFF_BYTES)[:_SNIFF_BYTES]:
            raise InputFormatError(f"{p}: binary data, not a CSV or JSONL trace")
        head, lines = _text_lines(stream, str(p))
        first = "".join(head).lstrip()[:1]
        if not first:
            raise InputFormatError(f"{p}: empty trace")
        if first == "[":
            raise InputFormatError(f"{p}:1: a JSON array; write one JSON object per line (JSONL)")
        reader = _read_jsonl if first == "{" else _read_csv
        workload = reader(itertools.chain(head, lines), str(p), skip_bad_rows)
    if not workload.requests:
        detail = f" ({workload.skipped_rows} bad rows skipped)" if workload.skipped_rows else ""
        raise InputFormatError(f"{p}: empty trace, no requests{detail}")
    return workload


# ---------------------------------------------------------------------------------------------------------
# Transforms
# ---------------------------------------------------------------------------------------------------------


def scale_rate(workload: Workload, factor: float) -> Workload:
    """Arrivals `factor` times as fast (the same requests, inter-arrival gaps divided by `factor`)."""
    if not (math.isfinite(factor) and factor > 0):  # NaN compares false to everything: say so here
        raise ValueError(f"rate factor must be a finite number > 0, got {factor}")
    columns = workload.columns
    arrivals = columns.arrivals
    if workload.clock == STEPS:
        return replace(
            workload, requests=columns.with_arrivals(float(math.floor(a / factor)) for a in arrivals)
        )
    start = arrivals[0] if arrivals else 0.0
    return replace(workload, requests=columns.with_arrivals(start + (a - start) / factor for a in arrivals))


def window(workload: Workload, start: float | None, end: float | None) -> Workload:
    """Only the requests arriving in [start, end), re-based so the first arrives at 0."""
    lo = start if start is not None else -math.inf
    hi = end if end is not None else math.inf
    columns = workload.columns
    rows: Sequence[int] = array("q", (i for i, a in enumerate(columns.arrivals) if lo <= a < hi))
    if not rows:
        raise ValueError(f"no request arrives in the window [{start}, {end})")
    if rows[-1] - rows[0] == len(rows) - 1:  # increasing indices: a run of rows
        rows = range(rows[0], rows[-1] + 1)
    kept = columns.take(rows)
    origin = kept.arrivals[0] if workload.clock == SECONDS else 0.0
    return replace(workload, requests=kept.with_arrivals(a - origin for a in kept.arrivals))


# ---------------------------------------------------------------------------------------------------------
# Generators
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LengthDist:
    """Token counts: fixed N, uniform A..B, or lognormal with a given mean and sigma (of log)."""

    kind: str
    a: float
    b: float = 0.0

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return max(1, int(self.a))
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        # lognormal whose mean is `a`: mu = ln(a) - sigma^2 / 2
        mu = math.log(self.a) - self.b * self.b / 2
        return max(1, round(rng.lognormvariate(mu, self.b)))

    @classmethod
    def parse(cls, text: str) -> LengthDist:
        """'512', 'uniform:100:300', 'lognormal:1000:0.8'."""
        parts = text.split(":")
        try:
            if len(parts) == 1:
                return cls("fixed", float(_int_field(parts[0], "length")))
            if parts[0] == "uniform" and len(parts) == 3:
                lo, hi = _int_field(parts[1], "low"), _int_field(parts[2], "high")
                if not 1 <= lo <= hi:
                    raise ValueError("need 1 <= low <= high")
                return cls("uniform", lo, hi)
            if parts[0] == "lognormal" and len(parts) == 3:
                mean, sigma = float(parts[1]), float(parts[2])
                if not (math.isfinite(mean) and math.isfinite(sigma) and mean >= 1 and sigma >= 0):
                    raise ValueError("need mean >= 1 and sigma >= 0")
                return cls("lognormal", mean, sigma)
        except ValueError as err:
            raise ValueError(f"bad length distribution {text!r}: {err}") from None
        raise ValueError(f"bad length distribution {text!r} (use N, uniform:A:B or lognormal:MEAN:SIGMA)")


# A generated workload beyond this many requests takes hours to simulate; a typo (rate=1e9) should not hang.
MAX_GENERATED_REQUESTS = 1_000_000

MAX_AGENTIC_TURNS = 200
MAX_AGENTIC_REQUESTS = 100_000


def _check_arrivals(rate: float, duration: float) -> None:
    """Rate and duration finite and positive, and their product (the expected requests) within reach."""
    if not (math.isfinite(rate) and math.isfinite(duration) and rate > 0 and duration > 0):
        raise ValueError(
            f"rate and duration must be finite numbers > 0, got rate={rate}, duration={duration}"
        )
    if rate * duration > MAX_GENERATED_REQUESTS:
        raise ValueError(
            f"rate x duration = {rate * duration:,.0f} requests; at most "
            f"{MAX_GENERATED_REQUESTS:,} are generated (lower the rate or the duration)"
        )


def poisson(rate: float, duration: float, prompt: LengthDist, output: LengthDist, seed: int = 0) -> Workload:
    """Poisson arrivals at `rate` requests/s for `duration` seconds."""
    _check_arrivals(rate, duration)
    rng = random.Random(seed)
    t = 0.0
    out: list[TraceRequest] = []
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            break
        out.append(TraceRequest(f"p{len(out)}", t, prompt.draw(rng), output.draw(rng)))
    if not out:
        raise ValueError("no request arrived; raise the rate or the duration")
    return Workload(tuple(out), SECONDS, f"poisson(rate={rate:g}/s, {duration:g} s, seed {seed})")


def bursty(
    rate: float,
    duration: float,
    prompt: LengthDist,
    output: LengthDist,
    burst_factor: float = 10.0,
    burst_s: float = 5.0,
    period_s: float = 60.0,
    seed: int = 0,
) -> Workload:
    """Poisson at `rate`, except `burst_s` seconds of every `period_s` at `burst_factor` x `rate`."""
    if (
        not all(math.isfinite(x) for x in (burst_factor, burst_s, period_s))
        or burst_factor <= 0
        or not 0 < burst_s <= period_s
    ):
        raise ValueError("need rate, duration, burst factor > 0 and 0 < burst_s <= period_s")
    _check_arrivals(max(rate, rate * burst_factor), duration)
    rng = random.Random(seed)
    peak = rate * burst_factor
    t = 0.0
    out: list[TraceRequest] = []
    while True:
        # Thinning: draw at the peak rate, keep with probability rate(t) / peak.
        t += rng.expovariate(max(peak, rate))
        if t >= duration:
            break
        current = peak if (t % period_s) < burst_s else rate
        if rng.random() * max(peak, rate) <= current:
            out.append(TraceRequest(f"b{len(out)}", t, prompt.draw(rng), output.draw(rng)))
    if not out:
        raise ValueError("no request arrived; raise the rate or the duration")
    return Workload(
        tuple(out), SECONDS, f"bursty(rate={rate:g}/s x{burst_factor:g} for {burst_s:g}s/{period_s:g}s)"
    )


def agentic(
    sessions: int = 7,
    turns: int = 20,
    think_s: float = 2.0,
    long_prompt: int = 153_853,
    long_at_s: float = 10.0,
    seed: int = 0,
) -> Workload:
    """The padded mixed-length prefill OOM's traffic: multi-turn sessions whose prompts grow by small appends
    (each turn reuses the
    previous turn's prefix), and one very long fresh prompt arriving among them."""
    # Each turn's prefix ids repeat every earlier turn's, so memory grows with sessions x turns^2.
    if not (1 <= sessions and 1 <= turns <= MAX_AGENTIC_TURNS and sessions * turns <= MAX_AGENTIC_REQUESTS):
        raise ValueError(
            f"need 1 <= turns <= {MAX_AGENTIC_TURNS} and 1 <= sessions, with sessions x turns <= "
            f"{MAX_AGENTIC_REQUESTS:,}; got {sessions} sessions x {turns} turns"
        )
    if long_prompt < 1:
        raise ValueError(f"long_prompt must be >= 1 token, got {long_prompt}")
    rng = random.Random(seed)
    out: list[TraceRequest] = []
    next_id = 1_000_000  # prefix ids of the sessions; the long prompt gets its own
    for s in range(sessions):
        t = rng.uniform(0, think_s)
        ids: list[int] = []
        context = rng.randint(2_000, 8_000)
        for turn in range(turns):
            while len(ids) * 512 < context:
                ids.append(next_id)
                next_id += 1
            reply = rng.randint(20, 400)
            out.append(TraceRequest(f"s{s}t{turn}", t, context, reply, tuple(ids)))
            context += reply + rng.randint(4, 1_400)  # the append: a tool result or a user turn
            t += think_s * rng.uniform(0.5, 1.5)
    out.append(TraceRequest("long", long_at_s, long_prompt, 50))
    out.sort(key=lambda r: r.arrival)
    return Workload(
        tuple(out), SECONDS, f"agentic({sessions} sessions x {turns} turns + {long_prompt}-token prompt)"
    )
