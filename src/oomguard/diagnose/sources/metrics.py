"""vLLM `/metrics` scrapes in the Prometheus text exposition format (0.0.4), one or several concatenated.

A real parser of the format: `# HELP` / `# TYPE` comments, samples `name{label="value",...} value [timestamp]`
with escaped label values (\\\\, \\", \\n), NaN and +/-Inf. From the samples it keeps what the diagnosis needs,
old and new names (ACCOUNTING.md §7): KV usage, running, waiting, preemptions, the cache config, process RSS.
A series seen again starts a new scrape.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from oomguard.diagnose.evidence import Evidence, HostMemory, LoadSample, StartupNumber, Where

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
RUNNING = ("vllm:num_requests_running",)
WAITING = ("vllm:num_requests_waiting",)
PREEMPTIONS = ("vllm:num_preemptions_total", "vllm:num_preemptions")
RSS = ("process_resident_memory_bytes",)
CACHE_INFO = "vllm:cache_config_info"


class MetricsSyntaxError(ValueError):
    pass


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    timestamp_ms: int | None
    line: int


def _unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        ch = value[i]
        if ch == "\\" and i + 1 < len(value):
            nxt = value[i + 1]
            out.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def parse_value(text: str) -> float:
    low = text.lower()
    if low in ("nan",):
        return math.nan
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    return float(text)


def parse_sample(line: str, no: int) -> Sample:
    """One sample line; raises MetricsSyntaxError with the reason."""
    m = _NAME.match(line)
    if not m:
        raise MetricsSyntaxError("no metric name")
    name, pos = m.group(0), m.end()
    labels: list[tuple[str, str]] = []
    if pos < len(line) and line[pos] == "{":
        pos += 1
        while True:
            while pos < len(line) and line[pos] in " \t":
                pos += 1
            if pos < len(line) and line[pos] == "}":
                pos += 1
                break
            lm = _LABEL_NAME.match(line, pos)
            if not lm:
                raise MetricsSyntaxError("bad label name")
            pos = lm.end()
            if line[pos : pos + 2] != '="':
                raise MetricsSyntaxError("label without =\"value\"")
            pos += 2
            start = pos
            while pos < len(line) and line[pos] != '"':
                pos += 2 if line[pos] == "\\" else 1
            if pos >= len(line):
                raise MetricsSyntaxError("unterminated label value")
            labels.append((lm.group(0), _unescape(line[start:pos])))
            pos += 1
            if pos < len(line) and line[pos] == ",":
                pos += 1
    rest = line[pos:].split()
    if not rest or len(rest) > 2:
        raise MetricsSyntaxError("expected a value and an optional timestamp")
    try:
        value = parse_value(rest[0])
        stamp = int(rest[1]) if len(rest) == 2 else None
    except ValueError as err:
        raise MetricsSyntaxError(f"bad number ({err})") from None
    return Sample(name, tuple(labels), value, stamp, no)


def parse_text(text: str) -> tuple[list[Sample], list[str]]:
    """All samples, and one note per line that could not be parsed (those are skipped)."""
    samples: list[Sample] = []
    bad: list[str] = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            samples.append(parse_sample(line, no))
        except MetricsSyntaxError as err:
            bad.append(f"line {no}: {err}")
    return samples, bad


def read_document(name: str, data: bytes, evidence: Evidence) -> tuple[int, list[str]]:
    """Facts from one scrape file: LoadSamples per scrape and engine, RSS, the cache config."""
    samples, bad = parse_text(data.decode("utf-8", "replace"))
    facts = 0
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    scrape: dict[str, dict[str, tuple[float, int]]] = {}

    def flush() -> None:
        nonlocal facts
        for engine, values in scrape.items():
            if not any(k in values for k in ("kv", "running", "waiting", "preempt")):
                continue
            line = min(v[1] for v in values.values())
            evidence.add(LoadSample(
                where=Where(name, line), text=f"/metrics scrape ({engine or 'engine'})",
                running=int(values["running"][0]) if "running" in values else None,
                waiting=int(values["waiting"][0]) if "waiting" in values else None,
                kv_usage=values["kv"][0] if "kv" in values else None,
                preemptions=values["preempt"][0] if "preempt" in values else None, engine=engine,
            ))
            facts += 1
        scrape.clear()
        seen.clear()

    for s in samples:
        key = (s.name, s.labels)
        if key in seen:
            flush()
        seen.add(key)
        labels = dict(s.labels)
        engine = labels.get("engine", "")
        slot = {n: k for k, names in (("kv", KV_USAGE), ("running", RUNNING), ("waiting", WAITING),
                                      ("preempt", PREEMPTIONS)) for n in names}.get(s.name)
        if slot:
            scrape.setdefault(engine, {})[slot] = (s.value, s.line)
        elif s.name in RSS:
            evidence.add(HostMemory(where=Where(name, s.line), text=f"{s.name} {s.value:.0f}", quantity="rss",
                                    value=s.value, scope="process"))
            facts += 1
        elif s.name == CACHE_INFO:
            for label, quantity in (("num_gpu_blocks", "num_gpu_blocks"), ("gpu_memory_utilization",
                                                                           "gpu_memory_utilization")):
                try:
                    value = float(labels[label])
                except (KeyError, ValueError):
                    continue
                evidence.add(StartupNumber(where=Where(name, s.line), text=f"{CACHE_INFO} {label}={labels[label]}",
                                           quantity=quantity, value=value, process_tag=engine))
                facts += 1
    flush()
    return facts, bad
