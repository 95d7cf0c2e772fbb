"""Hostile /metrics and Prometheus endpoints on 127.0.0.1, the fault injectors of the reliability campaign.

/drip        a valid body, one byte per `drip_s` seconds (Content-Length set)
/gzipbomb    `bomb_mib` MiB of zeros gzip-compressed (1 GiB is 1 MiB on the wire)
/biglabel    one label value of `label_bytes` bytes
/forge       terminal escapes and an escaped newline forging an alert line in a label
/truncated   Content-Length twice the body, then the connection closes
/static/NAME the bytes in `static[NAME]`; /static/NAME/api/v1/query_range answers any Prometheus query
"""

from __future__ import annotations

import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DRIP_BODY = b'vllm:num_requests_running{engine="0"} 1\nvllm:kv_cache_usage_perc{engine="0"} 0.5\n'
PROM_EMPTY = b'{"status":"success","data":{"resultType":"matrix","result":[]}}'
FORGE = (
    b'vllm:kv_cache_usage_perc{engine="0\x1b[2J\x1b[31m\\nCRITICAL memory_leak   nvml engine gpu0: '
    b'GPU memory FORGED"} 0.99\n'
)


def gzip_bomb(mib: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"\0" * (1 << 20)
    return b"".join(c.compress(zeros) for _ in range(mib)) + c.flush()


class Hostile:
    def __init__(self, *, drip_s: float = 1.0, bomb_mib: int = 256, label_bytes: int = 5 << 20) -> None:
        self.drip_s = drip_s
        self.drip_body = DRIP_BODY
        self.bomb_mib = bomb_mib
        self.label_bytes = label_bytes
        self.static: dict[str, bytes] = {}
        self._bomb: bytes | None = None
        self._server: ThreadingHTTPServer | None = None
        self.port = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def bomb(self) -> bytes:
        if self._bomb is None:
            self._bomb = gzip_bomb(self.bomb_mib)
        return self._bomb

    def start(self) -> Hostile:
        hostile = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def head(self, n: int, extra: tuple[tuple[str, str], ...] = ()) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(n))
                for k, v in extra:
                    self.send_header(k, v)
                self.end_headers()

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                try:
                    self.answer(path)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up, as it should

            def answer(self, path: str) -> None:
                if path == "/drip" or path.startswith("/drip/"):  # /drip/api/v1/query_range for Prometheus
                    self.head(len(hostile.drip_body))
                    for b in hostile.drip_body:
                        self.wfile.write(bytes([b]))
                        self.wfile.flush()
                        time.sleep(hostile.drip_s)
                elif path == "/gzipbomb":
                    bomb = hostile.bomb()
                    self.head(len(bomb), (("Content-Encoding", "gzip"),))
                    self.wfile.write(bomb)
                elif path == "/biglabel":
                    body = b'vllm:num_requests_running{engine="' + b"a" * hostile.label_bytes + b'"} 1\n'
                    self.head(len(body))
                    self.wfile.write(body)
                elif path == "/forge":
                    self.head(len(FORGE))
                    self.wfile.write(FORGE)
                elif path == "/truncated":
                    self.head(2 * len(DRIP_BODY))
                    self.wfile.write(DRIP_BODY)
                    self.wfile.flush()
                    self.close_connection = True
                elif path.startswith("/static/"):
                    name = path[len("/static/") :].split("/", 1)[0]
                    body = hostile.static.get(name)
                    if body is None:
                        self.send_error(404)
                        return
                    self.head(len(body))
                    self.wfile.write(body)
                else:
                    self.send_error(404)

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
