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

import csv
import io
import json
import math
import random
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from oomguard.errors import InputFormatError, shown
from oomguard.inputs import read_bounded

STEPS = "steps"
SECONDS = "seconds"


@dataclass(frozen=True)
class TraceRequest:
    rid: str
    arrival: float  # seconds from the start, or an engine step index when the workload's clock is "steps"
    prompt_tokens: int
    output_tokens: int
    prefix_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Workload:
    requests: tuple[TraceRequest, ...]
    clock: str  # SECONDS or STEPS
    source: str
    skipped_rows: int = 0

    @property
    def duration(self) -> float:
        return self.requests[-1].arrival - self.requests[0].arrival if self.requests else 0.0

    @property
    def prompt_tokens(self) -> int:
        return sum(r.prompt_tokens for r in self.requests)

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens for r in self.requests)


class _Rows:
    """Collects rows, turning each bad one into an error naming file and line, or a skip."""

    def __init__(self, path: str, skip_bad_rows: bool) -> None:
        self.path = path
        self.skip_bad_rows = skip_bad_rows
        self.skipped = 0
        self.requests: list[TraceRequest] = []

    def bad(self, line: int, why: str) -> None:
        if not self.skip_bad_rows:
            raise InputFormatError(f"{self.path}:{line}: {why} (use --skip-bad-rows to skip such rows)")
        self.skipped += 1

    def add(self, line: int, request: TraceRequest, *, need_sorted: bool) -> None:
        if request.prompt_tokens < 1:
            return self.bad(line, f"prompt tokens must be >= 1, got {request.prompt_tokens}")
        if request.output_tokens < 1:
            return self.bad(line, f"output tokens must be >= 1, got {request.output_tokens}")
        if not math.isfinite(request.arrival) or request.arrival < 0 and not need_sorted:
            return self.bad(line, f"arrival must be a finite number >= 0, got {request.arrival}")
        if need_sorted and self.requests and request.arrival < self.requests[-1].arrival:
            return self.bad(
                line, f"timestamps go backwards ({request.arrival:g} after {self.requests[-1].arrival:g})"
            )
        self.requests.append(request)


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


# A trace this large is read whole (about 13M rows of CSV); a FIFO or an endless stream stops here.
MAX_TRACE_BYTES = 256 << 20


def _read_text(path: Path) -> str:
    data = read_bounded(path, limit=MAX_TRACE_BYTES, what="trace", error=InputFormatError)
    if b"\x00" in data[:4096]:
        raise InputFormatError(f"{path}: binary data, not a CSV or JSONL trace")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise InputFormatError(f"{path}:{line}: not valid UTF-8 (byte 0x{data[err.start]:02x})") from None


# ---------------------------------------------------------------------------------------------------------
# JSONL
# ---------------------------------------------------------------------------------------------------------

_ARRIVAL_SECONDS = ("arrival_s", "arrival", "arrival_time", "timestamp_s", "time")
_PROMPT_KEYS = ("prompt_tokens", "input_tokens", "input_length", "context_tokens")
_OUTPUT_KEYS = ("output_tokens", "output_length", "generated_tokens")


def _jsonl_records(text: str, path: str, rows: _Rows) -> Iterator[tuple[int, dict[str, Any]]]:
    for line_no, line in enumerate(io.StringIO(text), 1):
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


def _pick(record: dict[str, Any], keys: Iterable[str]) -> str | None:
    for key in keys:
        if key in record:
            return key
    return None


def _read_jsonl(text: str, path: str, skip_bad_rows: bool) -> Workload:
    rows = _Rows(path, skip_bad_rows)
    kind: str | None = None
    for line_no, record in _jsonl_records(text, path, rows):
        if kind is None:
            if "arrival_step" in record or (
                "prompt_tokens" in record and "id" in record and _pick(record, _ARRIVAL_SECONDS) is None
            ):
                kind = "oracle"
            elif "input_length" in record and "timestamp" in record:
                kind = "mooncake"
            elif _pick(record, _PROMPT_KEYS) and _pick(record, _OUTPUT_KEYS):
                kind = "generic"
            else:
                raise InputFormatError(
                    f"{path}:{line_no}: unknown JSONL trace format (keys {sorted(record)[:6]}); expected "
                    "Mooncake (timestamp, input_length, output_length, hash_ids), the oracle's "
                    "(id, prompt_tokens, output_tokens, arrival_step) or "
                    "arrival_s/prompt_tokens/output_tokens"
                )
        try:
            if kind == "oracle":
                request = TraceRequest(
                    rid=str(record["id"]) if "id" in record else f"r{len(rows.requests)}",
                    arrival=float(_int_field(record.get("arrival_step", 0), "arrival_step")),
                    prompt_tokens=_int_field(record["prompt_tokens"], "prompt_tokens"),
                    output_tokens=_int_field(record["output_tokens"], "output_tokens"),
                    prefix_ids=_ids_field(record.get("prefix_hash_ids")),
                )
            elif kind == "mooncake":
                request = TraceRequest(
                    rid=f"r{len(rows.requests)}",
                    arrival=_float_field(record["timestamp"], "timestamp") / 1000.0,
                    prompt_tokens=_int_field(record["input_length"], "input_length"),
                    output_tokens=_int_field(record["output_length"], "output_length"),
                    prefix_ids=_ids_field(record.get("hash_ids")),
                )
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
                request = TraceRequest(
                    rid=str(record.get("id", f"r{len(rows.requests)}")),
                    arrival=arrival,
                    prompt_tokens=_int_field(record[prompt_key], prompt_key),
                    output_tokens=_int_field(record[output_key], output_key),
                    prefix_ids=_ids_field(record.get("prefix_ids", record.get("hash_ids"))),
                )
        except KeyError as err:
            rows.bad(line_no, f"missing field {err.args[0]!r}")
            continue
        except (ValueError, TypeError, json.JSONDecodeError) as err:
            rows.bad(line_no, str(err))
            continue
        rows.add(line_no, request, need_sorted=kind != "oracle")
    if kind == "oracle":
        seen: set[str] = set()
        for request in rows.requests:
            if request.rid in seen:
                raise InputFormatError(f"{path}: duplicate request id {shown(request.rid)}")
            seen.add(request.rid)
        # The oracle admits requests of the same step in file order: a stable sort by step.
        ordered = sorted(rows.requests, key=lambda r: r.arrival)
        return Workload(tuple(ordered), STEPS, path, rows.skipped)
    return Workload(tuple(rows.requests), SECONDS, path, rows.skipped)


# ---------------------------------------------------------------------------------------------------------
# CSV
# ---------------------------------------------------------------------------------------------------------


def _azure_timestamp(text: str) -> float:
    """'2023-11-16 18:17:03.9799600' (7 fractional digits) -> POSIX seconds."""
    text = text.strip()
    whole, _, frac = text.partition(".")
    # Azure's traces are UTC: read in the machine's zone, a DST change would add or remove an hour
    # fromisoformat is ~40x faster than strptime; it takes only the exact 19-character form here, so an
    # offset or an unpadded field still goes through strptime (and its error).
    if len(whole) == 19 and whole[10] == " ":
        moment = datetime.fromisoformat(whole)
    else:
        moment = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S")
    moment = moment.replace(tzinfo=timezone.utc)
    fraction = float("0." + frac) if frac else 0.0
    if frac and not frac.isdigit():
        raise ValueError(f"bad fractional seconds in {shown(text)}")
    return moment.timestamp() + fraction


# One plain Azure row: what `_read_csv` reads the slow way, recognised whole (no quoting, no spaces).
_AZURE_ROW = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.(\d+))?,(\d+),(\d+)")


def _read_azure_plain(text: str, path: str) -> Workload | None:
    """The Azure trace when every row is plain and valid, read line by line without the csv module; None
    when any row is not, so that `_read_csv` reads it (and says what is wrong where). Same numbers: a
    timestamp's whole seconds are read once per distinct value, as `_azure_timestamp` reads them."""
    lines = text.splitlines()
    match = _AZURE_ROW.fullmatch
    seconds: dict[str, float] = {}
    requests: list[TraceRequest] = []
    origin: float | None = None
    last = -math.inf
    for line in lines[1:]:
        m = match(line)
        if m is None:
            if line.strip():
                return None
            continue
        whole, frac, prompt, output = m.groups()
        base = seconds.get(whole)
        if base is None:
            try:
                base = seconds[whole] = datetime.fromisoformat(whole).replace(tzinfo=timezone.utc).timestamp()
            except ValueError:
                return None
        stamp = base + float("0." + frac) if frac else base + 0.0
        if origin is None:
            origin = stamp
        arrival = stamp - origin
        p, o = int(prompt), int(output)
        if p < 1 or o < 1 or arrival < last:
            return None
        last = arrival
        requests.append(TraceRequest(f"r{len(requests)}", arrival, p, o))
    return Workload(tuple(requests), SECONDS, path, 0)


def _read_csv(text: str, path: str, skip_bad_rows: bool) -> Workload:
    if text[:48].partition("\n")[0].rstrip("\r") == "TIMESTAMP,ContextTokens,GeneratedTokens":
        fast = _read_azure_plain(text, path)
        if fast is not None:
            return fast
    rows = _Rows(path, skip_bad_rows)
    reader = csv.reader(io.StringIO(text))
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
    origin: float | None = None
    width = len(names)
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as err:
            rows.bad(reader.line_num, f"unreadable CSV row ({err})")
            continue
        line_no = reader.line_num
        if not fields or all(not f.strip() for f in fields):
            continue
        if len(fields) < width:
            rows.bad(line_no, f"expected {width} columns, got {len(fields)}")
            continue
        try:
            if azure:
                stamp = _azure_timestamp(fields[i_time])
                if origin is None:
                    origin = stamp
                arrival = stamp - origin
            else:
                arrival = _float_field(fields[i_time], header[i_time]) * time_scale
            request = TraceRequest(
                rid=f"r{len(rows.requests)}",
                arrival=arrival,
                prompt_tokens=_int_field(fields[i_prompt], header[i_prompt]),
                output_tokens=_int_field(fields[i_output], header[i_output]),
                prefix_ids=_ids_field(fields[i_ids]) if i_ids is not None else (),
            )
        except (ValueError, TypeError, json.JSONDecodeError) as err:
            rows.bad(line_no, str(err))
            continue
        rows.add(line_no, request, need_sorted=True)
    return Workload(tuple(rows.requests), SECONDS, path, rows.skipped)


def read_workload(path: str | Path, *, skip_bad_rows: bool = False) -> Workload:
    """Read a trace file in any supported format; see the module docstring."""
    p = Path(path)
    text = _read_text(p)
    stripped = text.lstrip()
    if not stripped:
        raise InputFormatError(f"{p}: empty trace")
    if stripped[0] in "{[":
        if stripped[0] == "[":
            raise InputFormatError(f"{p}:1: a JSON array; write one JSON object per line (JSONL)")
        workload = _read_jsonl(text, str(p), skip_bad_rows)
    else:
        workload = _read_csv(text, str(p), skip_bad_rows)
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
    if workload.clock == STEPS:
        return replace(
            workload,
            requests=tuple(
                replace(r, arrival=float(math.floor(r.arrival / factor))) for r in workload.requests
            ),
        )
    start = workload.requests[0].arrival if workload.requests else 0.0
    return replace(
        workload,
        requests=tuple(
            TraceRequest(
                r.rid, start + (r.arrival - start) / factor, r.prompt_tokens, r.output_tokens, r.prefix_ids
            )
            for r in workload.requests
        ),
    )


def window(workload: Workload, start: float | None, end: float | None) -> Workload:
    """Only the requests arriving in [start, end), re-based so the first arrives at 0."""
    lo = start if start is not None else -math.inf
    hi = end if end is not None else math.inf
    kept = [r for r in workload.requests if lo <= r.arrival < hi]
    if not kept:
        raise ValueError(f"no request arrives in the window [{start}, {end})")
    origin = kept[0].arrival if workload.clock == SECONDS else 0.0
    return replace(workload, requests=tuple(replace(r, arrival=r.arrival - origin) for r in kept))


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
