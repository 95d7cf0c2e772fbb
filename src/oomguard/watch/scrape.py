"""Scraping vLLM /metrics endpoints over HTTP: deadlines, failures named, retries with exponential backoff.

A failed scrape (refused, timed out, HTTP error, an HTML error page, a body that is no metrics text) is a
record with its reason, never an exception: the watcher logs it, stores an `up 0` sample so the gap is on
disk, and tries that target again after a backoff that doubles with each failure.

Each scrape has a deadline for the whole exchange (`http_fetch`), and targets are scraped in parallel, so
a target that drips its body costs its own scrape `--timeout` and nothing else.
"""

from __future__ import annotations

import http.client
import socket
import time
import urllib.error
import urllib.parse
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from oomguard.errors import ConfigError
from oomguard.watch.http_fetch import DeadlineExceeded, FetchError, fetch
from oomguard.watch.metrics import vllm_samples
from oomguard.watch.prom_text import parse
from oomguard.watch.samples import Sample

DEFAULT_TIMEOUT_S = 5.0
MIN_TIMEOUT_S = 0.05  # below this no exchange can finish; 0 would mean a non-blocking socket
# A vLLM /metrics body is tens of KiB (a few MiB with hundreds of DP engines and LoRA adapters); this much,
# after decompression, means something is wrong.
MAX_BODY_BYTES = 64 << 20
MAX_SCRAPE_THREADS = 32
BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 60.0
# Prometheus' own Accept header: text format first, so servers that speak OpenMetrics still send 0.0.4.
ACCEPT = "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"


def normalize_url(text: str) -> str:
    """'localhost:8000' -> 'http://localhost:8000/metrics'; a URL with a path keeps it."""
    url = text.strip()
    if "://" not in url:
        url = "http://" + url
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as err:  # 'http://[::1': an unclosed IPv6 bracket
        raise ConfigError(f"{text!r} is not a URL ({err})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{text!r} is not an http(s) URL of a /metrics endpoint (e.g. http://localhost:8000)"
        )
    try:
        _ = parts.port  # urlsplit checks the port only when asked
    except ValueError:
        raise ConfigError(f"{text!r}: the port is not a number") from None
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


@dataclass(frozen=True)
class ScrapeOutcome:
    target: str
    ts: float
    ok: bool
    duration: float
    error: str = ""
    samples: tuple[Sample, ...] = ()
    models: dict[str, str] = field(default_factory=dict)
    skipped_lines: int = 0
    note: str = ""  # e.g. the first skipped line, when some were skipped


def failure_reason(err: BaseException) -> str:
    """The one-line reason a person needs: refused, timed out, HTTP 503 ..."""
    if isinstance(err, DeadlineExceeded):
        return "timed out"
    if isinstance(err, FetchError):
        return str(err)
    if isinstance(err, urllib.error.HTTPError):
        return f"HTTP {err.code} {err.reason}"
    if isinstance(err, urllib.error.URLError):
        err = err.reason if isinstance(err.reason, BaseException) else err
    if isinstance(err, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, ConnectionResetError):
        return "connection reset"
    if isinstance(err, http.client.IncompleteRead):
        return "connection closed mid-body"
    if isinstance(err, (http.client.HTTPException, OSError, EOFError, ValueError, zlib.error)):
        return f"{type(err).__name__}: {err}".strip().rstrip(":")
    return f"{type(err).__name__}: {err}"


def scrape_once(url: str, timeout: float = DEFAULT_TIMEOUT_S, *, now: float | None = None) -> ScrapeOutcome:
    """GET one /metrics URL within `timeout` seconds in all and turn it into canonical samples, or a failed
    outcome with its reason."""
    ts = time.time() if now is None else now
    start = time.monotonic()
    headers = {"Accept": ACCEPT, "Accept-Encoding": "gzip", "User-Agent": "oomguard-watch"}
    try:
        response = fetch(url, deadline=start + timeout, max_bytes=MAX_BODY_BYTES, headers=headers)
        content_type, body = response.content_type, response.body
    except Exception as err:  # noqa: BLE001 - every network failure becomes a recorded reason
        return ScrapeOutcome(url, ts, False, time.monotonic() - start, failure_reason(err))
    duration = time.monotonic() - start
    head = body[:512].lstrip().lower()
    if "html" in content_type or head.startswith((b"<!doctype", b"<html", b"<?xml", b"<")):
        return ScrapeOutcome(
            url, ts, False, duration, "got an HTML page, not metrics text (wrong URL or a proxy error page)"
        )
    exposition = parse(body)
    scraped = vllm_samples(exposition, url, ts)
    notes = list(scraped.notes)
    if exposition.skipped:
        first = exposition.skipped[0]
        notes.insert(
            0, f"{len(exposition.skipped)} line(s) skipped, first at line {first.lineno}: {first.reason}"
        )
    note = "; ".join(notes)
    if not scraped.vllm_found:
        reason = (
            "no metrics in the body" if exposition.num_samples == 0 else "no vllm: metrics (is this vLLM?)"
        )
        if note:
            reason += f"; {note}"
        return ScrapeOutcome(url, ts, False, duration, reason, skipped_lines=len(exposition.skipped))
    return ScrapeOutcome(
        url, ts, True, duration, "", scraped.samples, scraped.models, len(exposition.skipped), note
    )


@dataclass
class _TargetState:
    failures: int = 0
    next_at: float = 0.0


class Scraper:
    """Scrapes many endpoints concurrently; a failing one is retried after 1, 2, 4 ... 60 s, not every
    tick."""

    def __init__(
        self,
        urls: list[str],
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        backoff_base: float = BACKOFF_BASE_S,
        backoff_max: float = BACKOFF_MAX_S,
    ) -> None:
        self.urls = list(dict.fromkeys(urls))
        self.timeout = max(timeout, MIN_TIMEOUT_S)
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._state = {url: _TargetState() for url in self.urls}

    def due(self, now: float) -> list[str]:
        return [url for url in self.urls if self._state[url].next_at <= now]

    def failures(self, url: str) -> int:
        return self._state[url].failures

    def record(self, outcome: ScrapeOutcome) -> None:
        state = self._state[outcome.target]
        if outcome.ok:
            state.failures, state.next_at = 0, 0.0
        else:
            state.failures += 1
            state.next_at = outcome.ts + min(self.backoff_base * 2 ** (state.failures - 1), self.backoff_max)

    def scrape_due(self, now: float) -> list[ScrapeOutcome]:
        urls = self.due(now)
        if not urls:
            return []
        if len(urls) == 1:
            outcomes = [scrape_once(urls[0], self.timeout, now=now)]
        else:  # every scrape ends by its own deadline, so the slowest costs `timeout`, not the others' time
            with ThreadPoolExecutor(max_workers=min(len(urls), MAX_SCRAPE_THREADS)) as pool:
                outcomes = list(pool.map(lambda u: scrape_once(u, self.timeout, now=now), urls))
        for outcome in outcomes:
            self.record(outcome)
        return outcomes


def up_sample(outcome: ScrapeOutcome) -> Sample:
    return Sample(outcome.target, "", "up", outcome.ts, 1.0 if outcome.ok else 0.0)
