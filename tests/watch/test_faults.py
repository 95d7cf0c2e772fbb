"""The watch findings of the reliability campaign (D1-D4, H1-H3, H8, C1, C2, C5, C6, C11, W1, W3-W5, W9, W10,
U2), each as the fault that found it: a hostile endpoint, a locked or corrupted database, a signal, a
wedged NVML, a stepped clock."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from tests.run_oomguard import SRC, oomguard

from oomguard.watch.detectors import Alert, Thresholds, evaluate
from oomguard.watch.metrics import vllm_samples
from oomguard.watch.prom_text import parse
from oomguard.watch.prometheus_query import PrometheusError, PrometheusSource
from oomguard.watch.samples import Sample, SeriesKey, to_history
from oomguard.watch.scrape import Scraper, scrape_once
from oomguard.watch.store import Store, spill_paths
from oomguard.watch.view import alert_json, alert_line
from oomguard.watch.watcher import Watcher
from oomguard.watch.window import HistoryLoader, Window

from .hostile import Hostile

FAKE_NVML = Path(__file__).parent / "fakenvml"
HEALTHY = b'vllm:num_requests_running{engine="0",model_name="m"} 1\nvllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.3\n'  # noqa: E501
POISON = (
    b'vllm:num_requests_running{engine="0",model_name="m"} 1\n'
    b'vllm:num_requests_waiting{engine="0",model_name="a"} +Inf\n'
    b'vllm:num_requests_waiting{engine="0",model_name="b"} -Inf\n'
)


@pytest.fixture(scope="module")
def hostile() -> Hostile:
    server = Hostile(drip_s=0.5, bomb_mib=256, label_bytes=5 << 20).start()
    server.static.update(healthy=HEALTHY, poison=POISON)
    yield server  # type: ignore[misc]
    server.stop()


def _count(db: Path, table: str) -> int:
    return int(sqlite3.connect(db).execute(f"SELECT count(*) FROM {table}").fetchone()[0])


# ----- data loss --------------------------------------------------------------------------------------


def test_d1_a_nan_sample_is_dropped_and_every_later_write_succeeds(hostile: Hostile, tmp_path: Path) -> None:
    db = tmp_path / "p.sqlite"
    first = oomguard(
        "watch", "--once", "--no-nvml", "--no-host", "--db", str(db), f"{hostile.base}/static/poison"
    )
    assert first.returncode in (0, 1), first.stderr
    again = oomguard(
        "watch", "--count", "3", "--interval", "0.1s", "--no-nvml", "--no-host", "--db", str(db),
        f"{hostile.base}/static/healthy",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "NOT NULL" not in first.stderr + again.stderr
    per_target = dict(
        sqlite3.connect(db).execute(
            "SELECT target, count(*) FROM samples JOIN series ON series.id = series_id GROUP BY target"
        )
    )
    assert per_target[f"{hostile.base}/static/healthy"] == 3 * 3  # running, KV, up on each of 3 ticks
    assert per_target[f"{hostile.base}/static/poison"] >= 2  # the finite part of the bad scrape
    assert not any(p.exists() for p in spill_paths(str(db)))  # nothing left unsaved


def test_d1_a_sample_that_is_not_finite_is_counted_and_never_buffered(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.sqlite")
    accepted = store.add(
        [
            Sample("u", "0", "kv_cache_usage", 1e9, float("nan")),
            Sample("u", "0", "kv_cache_usage", 1e9 + 1, 0.5),
        ]
    )
    assert [s.value for s in accepted] == [0.5] and store.rejected == 1
    assert store.flush(1e9).pending == 0 and store.count_samples() == 1


SIGTERM_SCRIPT = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")   # the database cannot be written while this runs
time.sleep(float(sys.argv[2]))
"""


def test_d2_sigterm_with_an_unwritable_database_saves_the_buffer(hostile: Hostile, tmp_path: Path) -> None:
    db = tmp_path / "w.sqlite"
    Store(db).close(0.0)
    locker = subprocess.Popen([sys.executable, "-c", SIGTERM_SCRIPT, str(db), "30"])
    time.sleep(0.5)
    watch = subprocess.Popen(
        [sys.executable, "-m", "oomguard", "watch", "--interval", "0.2s", "--no-nvml", "--no-host",
         "--db", str(db), f"{hostile.base}/static/healthy"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(4.0)
    watch.send_signal(signal.SIGTERM)
    _, stderr = watch.communicate(timeout=30)
    locker.kill()
    locker.wait()
    assert watch.returncode == 0, stderr
    spill = spill_paths(str(db))[0]
    saved = len(spill.read_text().splitlines())
    assert saved > 0 and "saved to" in stderr
    assert oct(spill.stat().st_mode & 0o777) == "0o600"
    reopened = Store(db)
    assert reopened.recovered == saved and not spill.exists()
    assert _count(db, "samples") > 0


def test_d3_spill_files_are_named_by_the_database_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    a, b = (
        spill_paths(str(tmp_path / "a" / "oomguard-watch.sqlite")),
        spill_paths(str(tmp_path / "b" / "oomguard-watch.sqlite")),
    )
    assert a[0] != b[0] and a[1] != b[1]  # beside each database; and in the state dir, by identity
    assert a[1].parent == tmp_path / "state" / "oomguard" / "unsaved"


def test_d3_a_spill_file_others_can_write_is_not_imported(tmp_path: Path) -> None:
    db = tmp_path / "w.sqlite"
    planted = spill_paths(str(db))[0]
    planted.write_text(json.dumps({"scrape": ["http://evil/metrics", 1e9, True, 0.1, ""]}) + "\n")
    planted.chmod(0o666)
    store = Store(db)
    assert store.recovered == 0 and store.targets() == [] and planted.exists()


def test_d3_when_the_database_directory_is_read_only_the_spill_goes_to_the_private_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    db = tmp_path / "w.sqlite"
    store = Store(db)
    store.add([Sample("u", "0", "kv_cache_usage", 1e9 + i, 0.5) for i in range(10)])
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    beside = spill_paths(str(db))[0]
    beside.mkdir()  # the path beside the database cannot be a file
    result = store.close(1e9)
    other.execute("ROLLBACK")
    fallback = spill_paths(str(db))[1]
    assert str(fallback) in result.error and oct(fallback.stat().st_mode & 0o777) == "0o600"
    assert oct(fallback.parent.stat().st_mode & 0o777) == "0o700"
    assert Store(db).recovered == 10 and not fallback.exists()


def test_d4_restarts_while_the_database_is_unwritable_do_not_grow_the_spill(tmp_path: Path) -> None:
    db = tmp_path / "w.sqlite"
    store = Store(db)
    store.add([Sample("u", "0", "kv_cache_usage", 1e9 + i, 0.5) for i in range(100)])
    store.add_alert(1e9, "kv_saturation", "u engine 0", "warning", "KV full")
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    store.close(1e9)
    spill = spill_paths(str(db))[0]
    sizes = [len(spill.read_text().splitlines())]
    for _ in range(3):  # a supervisor restarts watch; the disk is still full
        Store(db).close(1e9)
        sizes.append(len(spill.read_text().splitlines()))
    assert sizes == [101] * 4
    other.execute("ROLLBACK")
    Store(db).close(1e9)
    again = Store(db)  # a second import of the same records (a crash before the delete) stores them once
    spill.write_text(json.dumps({"alert": [1e9, "kv_saturation", "u engine 0", "warning", "KV full"]}) + "\n")
    again.close(1e9)
    Store(db).close(1e9)
    assert _count(db, "samples") == 100 and _count(db, "alerts") == 1


def test_d4_a_buffer_past_its_bound_moves_to_the_spill_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import oomguard.watch.store as store_module

    monkeypatch.setattr(store_module, "MAX_PENDING", 50)
    db = tmp_path / "w.sqlite"
    store = Store(db)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    store.add([Sample("u", "0", "kv_cache_usage", 1e9 + i, 0.5) for i in range(80)])
    assert store.flush(1e9).pending == 0 and store.spilled == 80  # memory freed, nothing lost
    other.execute("ROLLBACK")
    store.add([Sample("u", "0", "kv_cache_usage", 2e9, 0.5)])
    store.flush(2e9 + 100)  # a good flush imports the spill
    assert store.count_samples() == 81


# ----- hangs --------------------------------------------------------------------------------------------


def test_h1_a_dripping_endpoint_costs_its_own_deadline_and_no_other_target_waits(hostile: Hostile) -> None:
    scraper = Scraper([f"{hostile.base}/drip", f"{hostile.base}/static/healthy"], timeout=1.0)
    start = time.monotonic()
    outcomes = {o.target.rsplit("/", 1)[1]: o for o in scraper.scrape_due(1e9)}
    assert time.monotonic() - start < 3.0
    assert outcomes["drip"].error == "timed out" and outcomes["healthy"].ok


def test_h1_a_dripping_prometheus_is_abandoned_at_the_deadline(hostile: Hostile) -> None:
    start = time.monotonic()
    with pytest.raises(PrometheusError, match="timed out"):
        PrometheusSource(f"{hostile.base}/drip", timeout=1.0).query_range("up", 0, 1, 1)
    assert time.monotonic() - start < 3.0


def test_h2_a_blocking_nvml_call_does_not_freeze_the_watcher(hostile: Hostile, tmp_path: Path) -> None:
    db = tmp_path / "n.sqlite"
    result = oomguard(
        "watch", "--no-host", "--interval", "0.2s", "--count", "10", "--timeout", "0.5s", "--json",
        "--db", str(db), f"{hostile.base}/static/healthy",
        env={"FAKE_NVML": "hang", "PYTHONPATH": f"{FAKE_NVML}{os.pathsep}{SRC}"},
        timeout=30,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert _count(db, "scrapes") == 10
    down = [json.loads(line) for line in result.stdout.splitlines()]
    assert any(a["detector"] == "target_down" and a["subject"] == "nvml" for a in down)


def test_h3_a_wall_clock_step_back_neither_stalls_nor_fakes_a_restart(
    hostile: Hostile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from oomguard.watch import cli

    real, t0 = time.time, time.time()
    monkeypatch.setattr(time, "time", lambda: real() - 60 if real() - t0 > 1.5 else real())
    start = time.monotonic()
    code = cli.main(
        ["--no-nvml", "--no-host", "--interval", "1s", "--count", "4", "--timeout", "1s", "--json",
         "--db", str(tmp_path / "c.sqlite"), f"{hostile.base}/static/healthy", f"{hostile.base}/drip"]
    )  # fmt: skip
    assert code == 0 and time.monotonic() - start < 9.0
    ts = [t for (t,) in sqlite3.connect(tmp_path / "c.sqlite").execute("SELECT ts FROM scrapes")]
    assert max(ts) - min(ts) < 10  # stored times follow the monotonic clock, not the 60 s step


def test_h8_after_the_first_tick_the_detectors_read_no_samples_from_the_database(
    hostile: Hostile, tmp_path: Path
) -> None:
    store = Store(tmp_path / "w.sqlite")
    store.add(Sample("u", str(e), "kv_cache_usage", 1e9 + 5 * k, 0.5) for e in range(8) for k in range(100))
    store.flush(0.0)
    watcher = Watcher(store, Scraper([f"{hostile.base}/static/healthy"], timeout=1.0))
    watcher.tick(1e9 + 500)
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    watcher.tick(1e9 + 505)
    assert not [s for s in statements if "FROM samples" in s and s.lstrip().upper().startswith("SELECT")]
    assert len(watcher.window.history()[SeriesKey("u", "3", "kv_cache_usage")]) == 100


def test_h8_a_label_that_changes_every_scrape_cannot_grow_the_window_without_bound() -> None:
    window = Window(3600.0, max_series_per_target=64)
    for k in range(100):  # 50 new engines every scrape
        window.add(Sample("u", f"e{k}-{j}", "requests_running", 1e9 + k, 1.0) for j in range(50))
    assert len(window.history()) == 64 and window.evicted == 100 * 50 - 64


def test_h8_a_large_history_is_read_newest_first_a_bounded_slice_a_tick(tmp_path: Path) -> None:
    store = Store(tmp_path / "big.sqlite")
    now = 1e9 + 3600
    store.add(
        Sample("u", str(e), m, now - 3600 + 5 * k, (e + k) % 7 / 10)
        for e in range(16)
        for m in ("kv_cache_usage", "requests_running", "requests_waiting", "preemptions")
        for k in range(720)
    )
    store.flush(0.0)  # 46,080 samples: the hour of 16 ranks
    window, loader = Window(3600.0), HistoryLoader(rows_per_tick=5_000)
    per_tick = []
    while not loader.done(now - 3600.0):
        per_tick.append(loader.load(window, store, now))
        history = window.history()
        newest_first = all(s.ts[0] >= loader.complete_from for s in history.values())
        assert newest_first and all(len(s) and s.ts[-1] == now - 5 for s in history.values())
    assert len(per_tick) >= 6 and max(per_tick) <= 2 * 5_000 and sum(per_tick) == 46_080
    whole = Window(3600.0)
    whole.seed(store.recent(now - 3600.0))  # the one read of before
    assert window.history() == whole.history()


def test_h8_detectors_whose_window_is_not_read_yet_wait() -> None:
    t0 = 1e9
    samples = [
        Sample("u", "0", "prompt_tokens", t0 + t, 1000.0 * (t if t < 300 else t - 300))
        for t in range(0, 600, 5)
    ]
    samples += [Sample("u", "0", "kv_cache_usage", t0 + t, 0.99) for t in range(0, 600, 5)]
    history = to_history(samples)
    everything = {a.detector for a in evaluate(history, t0 + 600)}
    assert {"restarts", "kv_saturation"} <= everything
    # read back to 500 s ago: the 600 s KV window is not whole, nor the hour of restarts
    assert not {a.detector for a in evaluate(history, t0 + 600, history_from=t0 + 100)} & everything
    # read back further than the KV window: KV is judged, restarts (an hour) still waits
    judged = {a.detector for a in evaluate(history, t0 + 600, history_from=t0 - 1)}
    assert "kv_saturation" in judged and "restarts" not in judged


# ----- crashes --------------------------------------------------------------------------------------------


def test_c1_a_gzip_bomb_is_refused_after_64_mib_of_inflation(hostile: Hostile) -> None:
    hostile.bomb()  # built before measuring
    tracemalloc.start()
    outcome = scrape_once(f"{hostile.base}/gzipbomb", 10.0)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert not outcome.ok and "larger than 64 MiB once decompressed" in outcome.error
    assert peak < 200 << 20


def test_c2_a_long_label_costs_bounded_memory_and_is_skipped(hostile: Hostile) -> None:
    tracemalloc.start()
    outcome = scrape_once(f"{hostile.base}/biglabel", 10.0)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert not outcome.ok and "longer than 64 KiB" in outcome.error
    assert peak < 64 << 20  # a 5 MB body, not 170 bytes per byte of label
    value = "x" * 60_000 + '\\"q\\"'
    [sample] = parse(f'vllm:num_requests_running{{engine="{value}"}} 1\n'.encode()).samples()
    assert sample.label("engine") == "x" * 60_000 + '"q"'


def test_c5_huge_values_on_two_engines_cannot_crash_a_tick(hostile: Hostile, tmp_path: Path) -> None:
    hostile.static["huge"] = (
        b'vllm:kv_cache_usage_perc{engine="0"} 1e308\nvllm:kv_cache_usage_perc{engine="1"} 1e308\n'
    )
    db = tmp_path / "h.sqlite"
    for name in ("huge", "healthy"):  # the restart against a healthy endpoint must not crash either
        result = oomguard(
            "watch", "--once", "--no-nvml", "--no-host", "--db", str(db), f"{hostile.base}/static/{name}"
        )
        assert result.returncode in (0, 1) and "internal error" not in result.stderr, result.stderr
    # and the detectors themselves survive values that overflow a mean
    huge = Window(3600)
    huge.add(Sample("u", e, "kv_cache_usage", 1e9 + k, 1.7e308) for e in "01" for k in range(3))
    evaluate(huge.history(), 1e9 + 3, Thresholds())


PROM_SHAPES = [
    "[" * 100_000 + "]" * 100_000,
    '{"status":"success","data":{"resultType":"matrix","result":[5]}}',
    '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"instance":"a"},"values":[[1,"abc"]]}]}}',
    '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"instance":"a"},"values":[[1]]}]}}',
    '{"status":"success","data":{"resultType":"matrix","result":[{"metric":["a"],"values":[]}]}}',
    '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"engine":0},"values":[]}]}}',
]


@pytest.mark.parametrize("shape", range(len(PROM_SHAPES)))
def test_c6_a_malformed_prometheus_answer_is_an_error_to_retry(hostile: Hostile, shape: int) -> None:
    hostile.static[f"prom{shape}"] = PROM_SHAPES[shape].encode()
    with pytest.raises(PrometheusError):
        PrometheusSource(f"{hostile.base}/static/prom{shape}", timeout=5.0).history(1e9, 1e9 + 60)


def test_c6_a_null_values_list_is_an_empty_series(hostile: Hostile) -> None:
    hostile.static["promnull"] = (
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":null}]}}'
    )
    history, _ = PrometheusSource(f"{hostile.base}/static/promnull", timeout=5.0).history(1e9, 1e9 + 60)
    assert history == {}


def test_c6_the_prometheus_loop_retries_a_malformed_answer(hostile: Hostile) -> None:
    hostile.static["prombad"] = PROM_SHAPES[2].encode()
    result = oomguard(
        "watch", "--prometheus", f"{hostile.base}/static/prombad", "--interval", "0.1s", "--count", "2"
    )
    assert result.returncode == 0 and "internal error" not in result.stderr, result.stderr


def test_c11_a_corrupted_database_is_a_one_line_error(hostile: Hostile, tmp_path: Path) -> None:
    db = tmp_path / "bad.sqlite"
    store = Store(db)
    store.add(Sample("u", "0", "kv_cache_usage", 1e9 + i, 0.5) for i in range(5000))
    store.close(0.0)
    with open(db, "r+b") as f:
        f.seek(4096 + 100)
        f.write(os.urandom(8192))
    result = oomguard(
        "watch", "--once", "--no-nvml", "--no-host", "--db", str(db), f"{hostile.base}/static/healthy"
    )
    assert result.returncode == 2 and "internal error" not in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2 and "move it aside" in result.stderr


# ----- wrong answers ------------------------------------------------------------------------------------


def test_w1_two_series_of_one_engine_are_never_summed_as_a_ratio() -> None:
    body = b'vllm:kv_cache_usage_perc{engine="0",model_name="a"} 0.6\nvllm:kv_cache_usage_perc{engine="0",model_name="b"} 0.6\n'  # noqa: E501
    scraped = vllm_samples(parse(body), "u", 1e9)
    kv = {s.engine: s.value for s in scraped.samples if s.metric == "kv_cache_usage"}
    assert kv == {"0/a": 0.6, "0/b": 0.6}
    dup = b'vllm:kv_cache_usage_perc{engine="0",lora="x"} 0.6\nvllm:kv_cache_usage_perc{engine="0",lora="y"} 0.7\n'  # noqa: E501
    [only] = [s for s in vllm_samples(parse(dup), "u", 1e9).samples if s.metric == "kv_cache_usage"]
    assert only.value == 0.7


def test_w3_the_host_probe_does_not_overwrite_the_endpoint_start_time() -> None:
    from oomguard.watch.host import HostProbe

    samples = HostProbe(pid=os.getpid(), target="http://127.0.0.1:8000/metrics").sample(1e9)
    assert "process_start_time" not in {s.metric for s in samples}
    assert "host_process_start_time" in {s.metric for s in samples}


def test_w4_label_values_reach_the_terminal_escaped(hostile: Hostile, tmp_path: Path) -> None:
    result = oomguard(
        "watch", "--count", "1", "--no-nvml", "--no-host", "--db", str(tmp_path / "f.sqlite"),
        f"{hostile.base}/forge",
    )  # fmt: skip
    assert "\x1b" not in result.stdout + result.stderr
    assert not any(line.startswith("CRITICAL") for line in result.stdout.splitlines())
    alert = Alert("kv_saturation", "warning", "u engine 0\x1b[2J\nCRITICAL forged", "s", (), (), 1e9)
    assert "\x1b" not in alert_line(alert) and "\n" not in alert_line(alert)


def test_w5_an_infinite_counter_is_no_restart_and_alert_json_is_strict() -> None:
    store = Store(":memory:")
    window = Window(3600)
    for i, v in enumerate([10.0, 20.0, float("inf"), 30.0, 40.0]):
        window.add(store.add([Sample("u", "0", "preemptions", 1e9 + 5 * i, v)]))
    alerts = evaluate(window.history(), 1e9 + 25, Thresholds())
    assert not [a for a in alerts if a.detector == "restarts"]
    odd = Alert("x", "warning", "s", "m", (), (), 1e9, float("inf"), float("nan"), 1.0, {"a": float("-inf")})
    decoded = json.loads(alert_json(odd), parse_constant=lambda c: pytest.fail(f"non-standard {c}"))
    assert decoded["eta_seconds"] is None and decoded["value"] is None and decoded["extra"] == {"a": None}


def test_w10_an_engine_that_vanishes_from_metrics_is_an_alert(hostile: Hostile, tmp_path: Path) -> None:
    two = b'vllm:num_requests_running{engine="0"} 1\nvllm:num_requests_running{engine="1"} 1\n'
    one = b'vllm:num_requests_running{engine="0"} 1\n'
    hostile.static["dp"] = two
    store = Store(tmp_path / "w.sqlite")
    watcher = Watcher(store, Scraper([f"{hostile.base}/static/dp"], timeout=2.0))
    watcher.tick(1e9)
    hostile.static["dp"] = one
    result = watcher.tick(1e9 + 5)
    [missing] = [a for a in result.alerts if a.detector == "engine_missing"]
    assert missing.subject.endswith("engine 1")
    hostile.static["dp"] = two
    assert not [a for a in watcher.tick(1e9 + 10).alerts if a.detector == "engine_missing"]


def test_w10_a_body_shorter_than_its_content_length_is_a_failed_scrape(hostile: Hostile) -> None:
    outcome = scrape_once(f"{hostile.base}/truncated", 5.0)
    assert not outcome.ok and outcome.error == "connection closed mid-body"


def test_w9_rules_refuse_windows_and_selectors_promtool_would_reject() -> None:
    for args in (["--leak-window", "1ms"], ["--leak-window", "0"], ["--kv-window", "0.1s"],
                 ["--selector", 'job=~"(?=x)"'], ["--selector", "job=vllm"], ["--selector", 'job="a" x']):  # fmt: skip  # noqa: E501
        result = oomguard("rules", *args)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)


# ----- unclear errors -------------------------------------------------------------------------------------


def test_u2_a_zero_timeout_is_refused_in_one_line() -> None:
    result = oomguard("watch", "--once", "--timeout", "0", "localhost:1")
    assert result.returncode == 2 and "--timeout" in result.stderr and len(result.stderr.splitlines()) == 1


def test_a_bad_flag_is_one_line_not_the_whole_usage() -> None:
    result = oomguard("watch", "--no-such-flag")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
