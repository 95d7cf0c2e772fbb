"""Start a real Prometheus (Debian's `prometheus` package) for tests: loopback only, temp dir, bounded
waits."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

READY_TIMEOUT_S = 30.0


def need(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.skip(
            f"{binary} not installed (Debian package `prometheus`, listed in .ci/apt-packages.txt; "
            f".ci/run installs it)"
        )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def backfill(openmetrics: str, data_dir: Path, work: Path) -> None:
    """Write history into a TSDB directory before Prometheus starts (promtool tsdb create-blocks-from)."""
    source = work / "backfill.om"
    source.write_text(openmetrics)
    subprocess.run(
        [need("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(source), str(data_dir)],
        check=True,
        capture_output=True,
        timeout=120,
    )


class Prometheus:
    def __init__(
        self, work: Path, scrape_targets: list[str], rule_file: Path | None, interval: str = "1s"
    ) -> None:
        self.work = work
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data = work / "data"
        self.data.mkdir(exist_ok=True)
        config = {
            "global": {
                "scrape_interval": interval,
                "evaluation_interval": interval,
                "scrape_timeout": interval,
            },
            "scrape_configs": [{"job_name": "vllm", "static_configs": [{"targets": scrape_targets}]}],
        }
        if rule_file is not None:
            config["rule_files"] = [str(rule_file)]
        self.config = work / "prometheus.yml"
        self.config.write_text(json.dumps(config))  # JSON is YAML
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Prometheus:
        self.log = open(self.work / "prometheus.log", "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                need("prometheus"),
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.data}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=30d",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=self.work,
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited: {(self.work / 'prometheus.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("prometheus did not become ready in time")

    def api(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=5) as response:
            return json.loads(response.read())["data"]

    def wait_for(self, path: str, ok: Any, timeout: float = 20.0) -> Any:
        """Poll an API path until `ok(data)` holds (bounded); returns the last data."""
        deadline = time.monotonic() + timeout
        data = self.api(path)
        while not ok(data) and time.monotonic() < deadline:
            time.sleep(0.25)
            data = self.api(path)
        return data

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
            self.process = None
            self.log.close()
