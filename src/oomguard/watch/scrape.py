"""Scraping vLLM /metrics endpoints over HTTP: timeouts, failures named, retries with exponential backoff.

A failed scrape (refused, timed out, HTTP error, an HTML error page, a body that is no metrics text) is a
record with its reason, never an exception: the watcher logs it, stores an `up 0` sample so the gap is on
disk, and tries that target again after a backoff that doubles with each failure.
"""

from __future__ import annotations

import gzip
import http.client
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from oomguard.errors import ConfigError
from oomguard.watch.metrics import vllm_samples
from oomguard.watch.prom_text import parse
from oomguard.watch.samples import Sample

DEFAULT_TIMEOUT_S = 5.0
MAX_BODY_BYTES = 64 << 20  # a vLLM /metrics body is tens of KiB; this much means something is wrong
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


def _read_body(response: http.client.HTTPResponse) -> bytes:
    body = response.read(MAX_BODY_BYTES + 1)
    if len(body) > MAX_BODY_BYTES:
        raise ValueError(f"body larger than {MAX_BODY_BYTES >> 20} MiB")
    encoding = (response.headers.get("Content-Encoding") or "").lower()
    if encoding == "gzip":
        body = gzip.decompress(body)
    elif encoding == "deflate":
        body = zlib.decompress(body)
    return body


def failure_reason(err: BaseException) -> str:
    """The one-line reason a person needs: refused, timed out, HTTP 503 ..."""
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
    """GET one /metrics URL and turn it into canonical samples, or a failed outcome with its reason."""
    ts = time.time() if now is None else now
    start = time.monotonic()
    request = urllib.request.Request(
        url, headers={"Accept": ACCEPT, "Accept-Encoding": "gzip", "User-Agent": "oomguard-watch"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            content_type = (response.headers.get("Content-Type") or "").lower()
            body = _read_body(response)
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
    note = ""
    if exposition.skipped:
        first = exposition.skipped[0]
        note = f"{len(exposition.skipped)} line(s) skipped, first at line {first.lineno}: {first.reason}"
    if not scraped.vllm_found:
        reason = (
            "no metrics in the body" if exposition.num_samples == 0 else "no vllm: metrics (is this vLLM?)"
        )
        if exposition.skipped:
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
    """Scrapes many endpoints concurrently; a failing one is retried after 1, 2, 4 ... 60 s, not every tick."""

    def __init__(
        self,
        urls: list[str],
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        backoff_base: float = BACKOFF_BASE_S,
        backoff_max: float = BACKOFF_MAX_S,
    ) -> None:
        self.urls = list(dict.fromkeys(urls))
        self.timeout = timeout
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
        else:
            with ThreadPoolExecutor(max_workers=min(len(urls), 16)) as pool:
                outcomes = list(pool.map(lambda u: scrape_once(u, self.timeout, now=now), urls))
        for outcome in outcomes:
            self.record(outcome)
        return outcomes


def up_sample(outcome: ScrapeOutcome) -> Sample:
    return Sample(outcome.target, "", "up", outcome.ts, 1.0 if outcome.ok else 0.0)
