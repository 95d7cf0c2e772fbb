"""`watch` end to end against a real local endpoint: restarts, gaps, replayed leaks, the CLI's output."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from tests.run_oomguard import oomguard

from oomguard.watch.detectors import Thresholds
from oomguard.watch.host import HostProbe, cgroup_memory, mem_total
from oomguard.watch.scrape import Scraper
from oomguard.watch.store import Store
from oomguard.watch.watcher import Watcher

from .exporter import EngineState, Exporter, ServerState, steady

T0 = 1_750_000_000.0


def test_an_endpoint_stopped_and_restarted_mid_run_leaves_a_gap_a_restart_and_every_sample(
    tmp_path: Path,
) -> None:
    epoch = {"start": T0 - 1000.0, "offset": 0}

    def scenario(n: int) -> ServerState:
        return steady(n - epoch["offset"], engines=2, start=epoch["start"])

    exporter = Exporter(scenario).start()
    store = Store(tmp_path / "w.sqlite")
    watcher = Watcher(store, Scraper([exporter.url], timeout=0.5, backoff_base=5.0, backoff_max=20.0))
    expected = 0
    try:
        for i in range(60):
            now = T0 + 5.0 * i
            if i == 20:
                exporter.stop()
            if i == 35:  # the server comes back: a new process, counters from zero
                epoch.update(start=now, offset=exporter.scrapes)
                exporter.start()
            result = watcher.tick(now)
            expected += sum(len(o.samples) + 1 for o in result.outcomes)  # + the `up` sample
    finally:
        exporter.stop()
    assert store.flush(T0 + 1e6, force=True).pending == 0
    rows = sqlite3.connect(tmp_path / "w.sqlite").execute("SELECT count(*) FROM samples").fetchone()[0]
    assert rows == expected
    [gap] = store.gaps(exporter.url)
    assert gap.start == T0 + 100.0 and gap.first_error == "connection refused"
    assert (
        gap.end is not None and T0 + 175.0 <= gap.end <= T0 + 200.0
    )  # back within one backoff of the restart
    assert [a.detector for a in result.alerts if a.subject == exporter.url] == ["restarts"]


def test_watch_resumes_from_the_same_database_after_its_own_restart(tmp_path: Path) -> None:
    with Exporter(lambda n: steady(n)) as exporter:
        for run in range(2):
            store = Store(tmp_path / "w.sqlite")
            watcher = Watcher(store, Scraper([exporter.url], timeout=1.0))
            for i in range(5):
                watcher.tick(T0 + 50.0 * run + 5.0 * i)
            store.close(T0)
    store = Store(tmp_path / "w.sqlite")
    history = store.history(0.0)
    assert len(next(s for k, s in history.items() if k.metric == "kv_cache_usage")) == 10


@pytest.mark.parametrize("seed", [11, 12])
def test_a_replayed_leak_is_detected_within_20_percent_of_the_truth(tmp_path: Path, seed: int) -> None:
    """API-server RSS leaks at steady load; the limit is this machine's real cgroup limit (or RAM)."""
    rng = random.Random(seed)
    import os

    cgroup = cgroup_memory(os.getpid())
    limit = float(cgroup.limit if cgroup is not None and cgroup.limit else mem_total())  # type: ignore[arg-type]
    step, hours = 15.0, 1.0
    slope = limit / 10 / 3600  # 10% of the limit per hour, from half of it: 4 h left after the hour

    def scenario(n: int) -> ServerState:
        state = steady(n)
        state.rss_bytes = limit / 2 + slope * step * n + rng.gauss(0, limit / 400)
        return state

    with Exporter(scenario) as exporter:
        store = Store(tmp_path / "w.sqlite")
        probe = HostProbe(port=exporter.port, target=exporter.url)
        watcher = Watcher(store, Scraper([exporter.url], timeout=1.0), [probe], Thresholds())
        ticks = int(hours * 3600 / step)
        for i in range(ticks):
            watcher.collect(T0 + step * i)
            store.flush(T0 + step * i)
        result = watcher.tick(T0 + step * ticks)
    leaks = [a for a in result.alerts if a.detector == "host_memory_growth"]
    assert [a.subject for a in leaks] == [exporter.url]
    truth = (limit - (limit / 2 + slope * step * ticks)) / slope
    assert leaks[0].eta_seconds == pytest.approx(truth, rel=0.2)
    assert "RSS of the API-server process" in leaks[0].summary


def test_once_with_json_prints_one_alert_per_line_and_exits_1(tmp_path: Path) -> None:
    full = ServerState(engines={"0": EngineState(kv_usage=0.98, running=64, waiting=12)})
    with Exporter(lambda n: full) as exporter:
        # three quick runs build a short history in the database; --once judges it
        for _ in range(3):
            result = oomguard(
                "watch", exporter.url, "--once", "--json", "--db", str(tmp_path / "w.sqlite"), "--no-host"
            )
    assert result.returncode == 1, result.stderr
    alerts = [json.loads(line) for line in result.stdout.splitlines()]
    kv = next(a for a in alerts if a["detector"] == "kv_saturation")
    assert kv["state"] == "firing" and kv["subject"] == f"{exporter.url} engine 0" and kv["fix"]


def test_once_on_a_quiet_server_exits_0_and_says_which_trends_still_need_samples(tmp_path: Path) -> None:
    with Exporter(lambda n: steady(n)) as exporter:
        result = oomguard("watch", exporter.url, "--once", "--db", str(tmp_path / "w.sqlite"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines and all(line.startswith("PENDING") for line in lines)
    assert any("kv_saturation" in line and "needs 3 samples, has 1" in line for line in lines)


def test_a_fresh_database_and_one_scrape_of_a_full_server_exits_1_with_level_alerts(tmp_path: Path) -> None:
    """Level detectors judge one sample: KV full, a KV-bound queue, a preemption counter already high."""
    import time

    full = ServerState(
        engines={"0": EngineState(kv_usage=0.97, running=64, waiting=37, preemptions=1532)},
        process_start=time.time() - 600,  # up 10 minutes: 153 preemptions a minute
    )
    with Exporter(lambda n: full) as exporter:
        result = oomguard("watch", exporter.url, "--once", "--no-host", "--db", str(tmp_path / "w.sqlite"))
    assert result.returncode == 1, result.stderr
    by_detector = {
        line.split()[1]: line for line in result.stdout.splitlines() if not line.startswith("PENDING")
    }
    assert "KV cache 97% full" in by_detector["kv_saturation"]
    assert "37 requests waiting" in by_detector["queue_backlog"]
    assert "1532 preemptions since the server started" in by_detector["preemptions"]
    assert "backing off" not in result.stderr


def test_a_bounded_run_against_a_dead_endpoint_logs_and_does_not_crash(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = oomguard(
        "watch",
        f"127.0.0.1:{port}",
        "--count",
        "3",
        "--interval",
        "0.2s",
        "--db",
        str(tmp_path / "w.sqlite"),
        "--json",
    )
    assert result.returncode == 0
    assert "connection refused" in result.stderr and "Traceback" not in result.stderr
    assert (
        sqlite3.connect(tmp_path / "w.sqlite")
        .execute("SELECT count(*) FROM scrapes WHERE ok=0")
        .fetchone()[0]
        >= 1
    )


def test_bad_options_are_one_line_and_exit_2(tmp_path: Path) -> None:
    for args in (
        ["watch"],
        ["watch", "ftp://x"],
        ["watch", "localhost:1", "--interval", "soon"],
        ["watch", "localhost:1", "--db", str(tmp_path)],
    ):
        result = oomguard(*args)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)


def test_once_on_a_dead_endpoint_reports_it_down_and_exits_1(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = oomguard("watch", f"127.0.0.1:{port}", "--once", "--json", "--db", str(tmp_path / "w.sqlite"))
    assert result.returncode == 1
    [alert] = [json.loads(line) for line in result.stdout.splitlines()]
    assert alert["detector"] == "target_down" and alert["subject"] == f"http://127.0.0.1:{port}/metrics"


def test_on_a_terminal_the_live_view_redraws_one_line_per_engine(tmp_path: Path) -> None:
    import os
    import pty

    state = ServerState(
        engines={
            "0": EngineState(kv_usage=0.31, running=7, waiting=0),
            "1": EngineState(kv_usage=0.97, running=40, waiting=9),
        }
    )
    with Exporter(lambda n: state) as exporter:
        leader, follower = pty.openpty()  # a real terminal: stdout.isatty() is true in the child
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "oomguard",
                "watch",
                exporter.url,
                "--count",
                "2",
                "--interval",
                "0.3s",
                "--db",
                str(tmp_path / "w.sqlite"),
                "--no-host",
            ],
            stdout=follower,
            stderr=subprocess.PIPE,
            close_fds=True,
        )
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        child.wait(timeout=30)
        os.close(leader)
    screen = b"".join(chunks).decode()
    assert child.returncode == 0
    assert screen.count("\x1b[H\x1b[2J") == 2  # redrawn each tick
    last = screen.rsplit("\x1b[H\x1b[2J", 1)[1]
    row0 = next(line for line in last.splitlines() if "engine 0" in line)
    row1 = next(line for line in last.splitlines() if "engine 1" in line)
    assert "31%" in row0 and "97%" in row1 and " 40 " in row1
    assert "dp_imbalance" in last and "evidence:" in last


PLAN = "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192"


def test_a_server_with_clearly_fewer_kv_blocks_than_planned_is_flagged(tmp_path: Path) -> None:
    """The plan uses the utilization the server reports in cache_config_info, not the command's default."""
    from oomguard.watch.planned import planned_capacity

    reported = ServerState().gpu_memory_utilization
    planned = planned_capacity(PLAN, "H100", reported).num_gpu_blocks
    assert planned != planned_capacity(PLAN, "H100").num_gpu_blocks  # the default differs: it matters
    for blocks, expect in ((planned, False), (int(planned * 0.7), True)):
        state = ServerState(num_gpu_blocks=blocks)
        with Exporter(lambda n, state=state: state) as exporter:
            result = oomguard(
                "watch",
                exporter.url,
                "--once",
                "--json",
                "--no-host",
                "--plan",
                PLAN,
                "--gpu",
                "H100",
                "--db",
                str(tmp_path / f"{blocks}.sqlite"),
            )
        alerts = [json.loads(line) for line in result.stdout.splitlines()]
        shortfall = [a for a in alerts if a["detector"] == "kv_pool_shortfall"]
        assert bool(shortfall) is expect, result.stdout + result.stderr
        if expect:
            assert shortfall[0]["value"] == pytest.approx(0.3, abs=0.01)
            assert any("cache_config_info" in line for line in shortfall[0]["evidence"])
