"""A local stand-in for vLLM's /metrics: a real HTTP server on 127.0.0.1 replaying vLLM-format text.

The body follows what prometheus_client renders for vLLM v1 (HELP/TYPE lines, `_total` and `_created`
counters, histograms with `le` buckets and +Inf, `cache_config_info` labels, the process collector), with
per-engine series for data-parallel engines. What each scrape shows comes from a `Scenario`: a function
of the scrape number, so tests replay minutes or hours of load in as many requests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


@dataclass
class EngineState:
    kv_usage: float = 0.3
    running: int = 8
    waiting: int = 0
    preemptions: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    finished_stop: float = 0.0
    finished_length: float = 0.0


@dataclass
class ServerState:
    engines: dict[str, EngineState] = field(default_factory=lambda: {"0": EngineState()})
    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    num_gpu_blocks: int | None = 27_288
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    process_start: float = 1_750_000_000.0
    rss_bytes: float = 2.5e9
    old_names: bool = False  # v0.10: serve the deprecated gpu_cache_usage_perc beside the new one
    only_old_names: bool = False  # before 2025-06: only the old name


Scenario = Callable[[int], ServerState]


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def render(state: ServerState) -> str:
    """The /metrics body for one moment."""
    out: list[str] = []
    created = f"{state.process_start + 5:.9e}"
    out += [
        "# HELP python_gc_objects_collected_total Objects collected during gc",
        "# TYPE python_gc_objects_collected_total counter",
        'python_gc_objects_collected_total{generation="0"} 12345.0',
        "# HELP process_resident_memory_bytes Resident memory size in bytes.",
        "# TYPE process_resident_memory_bytes gauge",
        f"process_resident_memory_bytes {state.rss_bytes:.1f}",
        "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.",
        "# TYPE process_start_time_seconds gauge",
        f"process_start_time_seconds {state.process_start:.2f}",
    ]

    def gauge(name: str, help_text: str, value_of: Callable[[EngineState], float]) -> None:
        out.extend([f"# HELP {name} {help_text}", f"# TYPE {name} gauge"])
        for engine, e in state.engines.items():
            out.append(
                f"{name}{_labels(engine=engine, model_name=state.model)} {value_of(e):.1f}"
                if name.startswith("vllm:num_")
                else f"{name}{_labels(engine=engine, model_name=state.model)} {value_of(e)!r}"
            )

    def counter(name: str, help_text: str, value_of: Callable[[EngineState], float]) -> None:
        out.extend([f"# HELP {name}_total {help_text}", f"# TYPE {name}_total counter"])
        for engine, e in state.engines.items():
            out.append(f"{name}_total{_labels(engine=engine, model_name=state.model)} {value_of(e):.1f}")
            out.append(f"{name}_created{_labels(engine=engine, model_name=state.model)} {created}")

    gauge("vllm:num_requests_running", "Number of requests in model execution batches.", lambda e: e.running)
    gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", lambda e: e.waiting)
    if not state.only_old_names:
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", lambda e: e.kv_usage)
    if state.old_names or state.only_old_names:
        gauge(
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: Use "
            "vllm:kv_cache_usage_perc instead.",
            lambda e: e.kv_usage,
        )
    counter(
        "vllm:num_preemptions", "Cumulative number of preemption from the engine.", lambda e: e.preemptions
    )
    counter("vllm:prompt_tokens", "Number of prefill tokens processed.", lambda e: e.prompt_tokens)
    counter("vllm:generation_tokens", "Number of generation tokens processed.", lambda e: e.generation_tokens)
    out += [
        "# HELP vllm:request_success_total Count of successfully processed requests.",
        "# TYPE vllm:request_success_total counter",
    ]
    for engine, e in state.engines.items():
        for reason, value in (("stop", e.finished_stop), ("length", e.finished_length), ("abort", 0.0)):
            out.append(
                f"vllm:request_success_total"
                f"{_labels(engine=engine, finished_reason=reason, model_name=state.model)} {value:.1f}"
            )
    out += [
        "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
        "# TYPE vllm:time_to_first_token_seconds histogram",
    ]
    for engine, e in state.engines.items():
        count = e.finished_stop + e.finished_length
        for le in TTFT_BUCKETS:
            share = min(1.0, le / 0.5)
            out.append(
                f"vllm:time_to_first_token_seconds_bucket{_labels(engine=engine, le=str(le), model_name=state.model)}"  # noqa: E501
                f" {count * share:.1f}"
            )
        out.append(
            f"vllm:time_to_first_token_seconds_bucket{_labels(engine=engine, le='+Inf', model_name=state.model)}"  # noqa: E501
            f" {count:.1f}"
        )
        out.append(
            f"vllm:time_to_first_token_seconds_count{_labels(engine=engine, model_name=state.model)} "
            f"{count:.1f}"
        )
        out.append(
            f"vllm:time_to_first_token_seconds_sum{_labels(engine=engine, model_name=state.model)} "
            f"{count * 0.21:.3f}"
        )
    out += [
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
        "# TYPE vllm:cache_config_info gauge",
    ]
    blocks = "None" if state.num_gpu_blocks is None else str(state.num_gpu_blocks)
    for engine in state.engines:
        out.append(
            "vllm:cache_config_info"
            + _labels(
                block_size=str(state.block_size),
                cache_dtype="auto",
                calculate_kv_scales="False",
                cpu_offload_gb="0",
                enable_prefix_caching="True",
                engine=engine,
                gpu_memory_utilization=str(state.gpu_memory_utilization),
                is_attention_free="False",
                num_cpu_blocks="None",
                num_gpu_blocks=blocks,
                num_gpu_blocks_override="None",
                prefix_caching_hash_algo="sha256",
                sliding_window="None",
                swap_space="4",
                swap_space_bytes="4294967296",
            )
            + " 1.0"
        )
    return "\n".join(out) + "\n"


class Exporter:
    """Serves `scenario(n)` for the n-th scrape (from 0) at http://127.0.0.1:PORT/metrics.

    `stop()` closes the listening socket (connections are refused); `start()` reopens on the same port.
    `raw` overrides the body (bytes) and `content_type` the header, to serve broken answers on purpose.
    """

    def __init__(self, scenario: Scenario, port: int = 0) -> None:
        self.scenario = scenario
        self.scrapes = 0
        self.port = port
        self.raw: bytes | None = None
        self.content_type = "text/plain; version=0.0.4; charset=utf-8"
        self.status = 200
        self.delay_s = 0.0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def body(self) -> bytes:
        with self._lock:
            n = self.scrapes
            self.scrapes += 1
        return self.raw if self.raw is not None else render(self.scenario(n)).encode()

    def start(self) -> Exporter:
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if exporter.delay_s:
                    time.sleep(exporter.delay_s)
                body = exporter.body()
                self.send_response(exporter.status)
                self.send_header("Content-Type", exporter.content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Exporter:  # noqa: PYI034 - typing.Self needs Python 3.11
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def steady(n: int, *, engines: int = 1, kv: float = 0.4, start: float = 1_750_000_000.0) -> ServerState:
    """Constant load: counters grow by the same amount each scrape."""
    return ServerState(
        engines={
            str(i): EngineState(kv, 8, 0, 0.0, 5000.0 * n, 400.0 * n, 2.0 * n, 0.0) for i in range(engines)
        },
        process_start=start,
    )
