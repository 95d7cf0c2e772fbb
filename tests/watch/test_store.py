"""The SQLite store: resumable, versioned, and never losing a sample when the disk or the lock says no."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from oomguard.errors import InputFormatError
from oomguard.watch.samples import Sample, SeriesKey
from oomguard.watch.store import ScrapeRecord, Store, find_gaps


def _samples(n: int, start: float = 1000.0, target: str = "http://a/metrics") -> list[Sample]:
    return [Sample(target, "0", "kv_cache_usage", start + i, i / n) for i in range(n)]


def test_samples_survive_closing_and_reopening(tmp_path: Path) -> None:
    db = tmp_path / "w.sqlite"
    store = Store(db)
    store.add(_samples(50))
    store.flush(0.0)
    store.close(0.0)
    reopened = Store(db)
    reopened.add(_samples(10, start=2000.0))
    reopened.flush(0.0)
    series = reopened.history(0.0)[SeriesKey("http://a/metrics", "0", "kv_cache_usage")]
    assert len(series) == 60 and series.ts[0] == 1000.0 and series.ts[-1] == 2009.0


def test_the_database_uses_wal_and_records_its_schema_version(tmp_path: Path) -> None:
    Store(tmp_path / "w.sqlite").close(0.0)
    db = sqlite3.connect(tmp_path / "w.sqlite")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA user_version").fetchone()[0] == 1


def test_a_newer_schema_is_refused_with_one_line(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "w.sqlite")
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(InputFormatError, match="schema 99 is newer"):
        Store(tmp_path / "w.sqlite")


def test_a_file_that_is_not_sqlite_is_refused_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    with pytest.raises(InputFormatError, match="cannot use as the watch database"):
        Store(path)


def test_unflushed_samples_are_visible_to_readers(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.sqlite")
    store.add(_samples(5))
    assert len(store.history(0.0)[SeriesKey("http://a/metrics", "0", "kv_cache_usage")]) == 5
    assert store.count_samples() == 5


def test_a_locked_database_keeps_the_batch_and_writes_it_later(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.sqlite")
    other = sqlite3.connect(tmp_path / "w.sqlite", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
    store.add(_samples(20))
    failed = store.flush(10.0)
    assert failed.written == 0 and failed.pending == 20 and "locked" in failed.error
    assert store.flush(10.5).pending == 20  # backing off: not retried yet
    other.execute("ROLLBACK")
    done = store.flush(12.0)
    assert done.written == 20 and done.pending == 0
    assert other.execute("SELECT count(*) FROM samples").fetchone()[0] == 20


FULL_DISK_SCRIPT = textwrap.dedent("""
    import resource, signal, sqlite3, sys
    from oomguard.watch.samples import Sample
    from oomguard.watch.store import Store
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # let write() fail with EFBIG instead of killing us
    path = sys.argv[1]
    store = Store(path)
    store.add([Sample("t", "0", "kv_cache_usage", float(i), 0.5) for i in range(100)])
    assert store.flush(0.0).pending == 0
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    import os
    biggest = max(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
    resource.setrlimit(resource.RLIMIT_FSIZE, (biggest + 8192, hard))   # the disk is now full
    store.add([Sample("t", "0", "kv_cache_usage", 1000.0 + i, 0.25) for i in range(20000)])
    full = store.flush(1.0)
    print("FULL", full.written, full.pending, full.error)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))             # space freed
    again = store.flush(1000.0)
    print("AGAIN", again.written, again.pending)
    store.close(1000.0)
    print("COUNT", sqlite3.connect(path).execute("SELECT count(*) FROM samples").fetchone()[0])
""")


def test_a_full_disk_loses_no_sample(tmp_path: Path) -> None:
    """A real write failure (RLIMIT_FSIZE: the kernel refuses to grow the files), then space comes back."""
    result = subprocess.run(
        [sys.executable, "-c", FULL_DISK_SCRIPT, str(tmp_path / "w.sqlite")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    written, pending, error = lines["FULL"].split(" ", 2)
    assert (written, pending) == ("0", "20000") and error  # refused, kept, reported
    assert lines["AGAIN"] == "20000 0"
    assert lines["COUNT"] == "20100"
    assert "cannot write" in result.stderr  # logged


def test_gaps_are_runs_of_failed_scrapes_closed_by_the_next_good_one() -> None:
    records = [
        ScrapeRecord("u", t, ok, 0.01, "" if ok else "connection refused")
        for t, ok in [(0, True), (5, False), (6, False), (8, False), (12, True), (17, False)]
    ]
    gaps = find_gaps(records)
    assert [(g.start, g.end, g.failures) for g in gaps] == [(5, 12, 3), (17, None, 1)]
    assert gaps[0].first_error == "connection refused"


def test_records_unwritable_at_exit_are_saved_aside_and_read_back_on_the_next_open(tmp_path: Path) -> None:
    db = tmp_path / "w.sqlite"
    store = Store(db)
    store.add(_samples(30))
    store.add_scrape(ScrapeRecord("http://a/metrics", 5.0, False, 0.1, "connection refused"))
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # the database cannot be written when watch stops
    closing = store.close(0.0)
    assert closing.pending == 0 and "saved to" in closing.error
    other.execute("ROLLBACK")
    spill = Path(str(db) + ".unsaved.jsonl")
    assert len(spill.read_text().splitlines()) == 31
    reopened = Store(db)
    assert reopened.recovered == 31 and not spill.exists()
    assert other.execute("SELECT count(*) FROM samples").fetchone()[0] == 30
    assert [g.first_error for g in reopened.gaps("http://a/metrics")] == ["connection refused"]
