"""One HTTP GET bounded as a whole: a deadline for the entire exchange, a size limit after decompression.

`urlopen(timeout=)` limits each socket read, so a server that sends one byte per second never times out.
Here the deadline covers connecting, the status line, the headers, every redirect and the whole body: a
timer shuts the socket down when it passes, which wakes any read blocked on it, and each read in between
is given only the time that is left. A gzip or deflate body is inflated incrementally and refused as soon
as it passes the limit (a 1 MiB gzip bomb is 1 GiB inflated). A body shorter than its Content-Length is an
error, not a short success.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.parse
import zlib
from dataclasses import dataclass

CHUNK_BYTES = 64 << 10
MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)
# zlib window bits: 16 + 15 reads a gzip member, -15 raw deflate, 15 zlib-wrapped deflate (HTTP's "deflate").
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class DeadlineExceeded(TimeoutError):
    """The whole exchange took longer than its deadline."""


class FetchError(Exception):
    """The server answered, but not with a usable body (HTTP error, too large, cut short, bad encoding)."""

    def __init__(self, message: str, status: int | None = None, body: bytes = b"") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


@dataclass(frozen=True)
class Response:
    url: str
    status: int
    content_type: str
    body: bytes  # decompressed


class _Watchdog:
    """Shuts a connection's socket down at the deadline, waking a read blocked on it."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float) -> None:
        self.fired = False
        self._conn = conn
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed

    def cancel(self) -> None:
        self._timer.cancel()


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlineExceeded("deadline passed")
    return left


def _inflate(chunks: list[bytes], encoding: str, limit: int) -> bytes:
    if encoding in ("", "identity"):
        return b"".join(chunks)
    wbits = _WBITS.get(encoding)
    if wbits is None:
        raise FetchError(f"unsupported Content-Encoding {encoding!r}")
    inflater = zlib.decompressobj(wbits)
    out = bytearray()
    try:
        for chunk in chunks:
            data = chunk
            while data:
                out += inflater.decompress(data, limit + 1 - len(out))
                if len(out) > limit:
                    raise FetchError(f"body larger than {limit >> 20} MiB once decompressed")
                data = inflater.unconsumed_tail
        out += inflater.flush(limit + 1 - len(out))
    except zlib.error as err:
        raise FetchError(f"corrupt {encoding} body ({err})") from None
    if len(out) > limit:
        raise FetchError(f"body larger than {limit >> 20} MiB once decompressed")
    if not inflater.eof:
        raise FetchError(f"{encoding} body cut short")
    return bytes(out)


def _read_body(response: http.client.HTTPResponse, deadline: float, limit: int) -> list[bytes]:
    chunks: list[bytes] = []
    size = 0
    while True:
        _remaining(deadline)
        chunk = response.read1(CHUNK_BYTES)
        if not chunk:
            break
        size += len(chunk)
        if size > limit:
            raise FetchError(f"body larger than {limit >> 20} MiB")
        chunks.append(chunk)
    if time.monotonic() >= deadline:
        raise DeadlineExceeded("deadline passed")
    if response.length:  # Content-Length promised more than arrived before the close
        raise http.client.IncompleteRead(b"".join(chunks), response.length)
    return chunks


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchError(f"not an http(s) URL: {url!r}")
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return cls(parts.netloc, timeout=timeout), path


def fetch(url: str, *, deadline: float, max_bytes: int, headers: dict[str, str] | None = None) -> Response:
    """GET `url`, following redirects, finished by `deadline` (time.monotonic()) or DeadlineExceeded.

    Raises FetchError for HTTP >= 400 (with the body, bounded), a body over `max_bytes` (before or after
    decompression) or a bad encoding; OSError / http.client.HTTPException for network failures."""
    for _ in range(MAX_REDIRECTS + 1):
        conn, path = _connection(url, _remaining(deadline))
        watchdog = _Watchdog(conn, _remaining(deadline))
        try:
            conn.request("GET", path, headers=headers or {})
            response = conn.getresponse()
            if response.status in _REDIRECTS and response.getheader("Location"):
                url = urllib.parse.urljoin(url, response.getheader("Location", ""))
                continue
            chunks = _read_body(response, deadline, max_bytes)
            encoding = (response.getheader("Content-Encoding") or "").strip().lower()
            content_type = (response.getheader("Content-Type") or "").lower()
            if response.status >= 400:
                raise FetchError(
                    f"HTTP {response.status} {response.reason}".strip(), response.status, b"".join(chunks)
                )
            return Response(url, response.status, content_type, _inflate(chunks, encoding, max_bytes))
        except (OSError, http.client.HTTPException):
            if watchdog.fired or time.monotonic() >= deadline:
                raise DeadlineExceeded("deadline passed") from None
            raise
        finally:
            watchdog.cancel()
            conn.close()
    raise FetchError(f"more than {MAX_REDIRECTS} redirects")
