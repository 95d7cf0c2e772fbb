"""Samples on disk: one SQLite file (WAL), versioned schema, batched writes that never drop a sample.

Writes are buffered in memory and flushed in one transaction. When a flush fails (disk full, I/O error,
another writer holding the lock) the transaction rolls back, the buffer is kept, the failure is reported and
the flush is retried with backoff; reads merge the buffer in, so detectors keep working meanwhile.
Re-opening the same file resumes: series ids, samples and scrape history are all there.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from oomguard.errors import InputFormatError
from oomguard.watch.samples import RankKey, Sample, Series, SeriesKey, to_history

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS series (
    id INTEGER PRIMARY KEY, target TEXT NOT NULL, engine TEXT NOT NULL, metric TEXT NOT NULL,
    UNIQUE (target, engine, metric));
CREATE TABLE IF NOT EXISTS samples (
    series_id INTEGER NOT NULL REFERENCES series(id), ts REAL NOT NULL, value REAL NOT NULL,
    PRIMARY KEY (series_id, ts)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS scrapes (
    target TEXT NOT NULL, ts REAL NOT NULL, ok INTEGER NOT NULL, duration REAL NOT NULL, error TEXT NOT NULL,
    PRIMARY KEY (target, ts)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ranks (
    target TEXT NOT NULL, engine TEXT NOT NULL, model TEXT NOT NULL, PRIMARY KEY (target, engine));
CREATE TABLE IF NOT EXISTS alerts (
    ts REAL NOT NULL, detector TEXT NOT NULL, subject TEXT NOT NULL, severity TEXT NOT NULL, body TEXT NOT NULL);
"""
LOCK_TIMEOUT_S = 1.0  # wait this long for another writer before treating the flush as failed
RETRY_BASE_S = 1.0
RETRY_MAX_S = 60.0
_FAR_FUTURE = 1e300
SPILL_SUFFIX = ".unsaved.jsonl"  # what could not be written at exit, read back on the next open


@dataclass(frozen=True)
class ScrapeRecord:
    target: str
    ts: float
    ok: bool
    duration: float
    error: str = ""


@dataclass(frozen=True)
class Gap:
    """A stretch during which a target did not answer: from the first failed scrape to the next good one."""

    target: str
    start: float
    end: float | None  # None: still down
    failures: int
    first_error: str


@dataclass(frozen=True)
class FlushResult:
    written: int
    pending: int
    error: str = ""


class Store:
    """The watch database. Not thread-safe: one watcher owns it."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        try:
            self._db = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT_S, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise InputFormatError(
                    f"{self.path}: watch database schema {version} is newer than this oomguard's "
                    f"({SCHEMA_VERSION}); upgrade oomguard or use another --db"
                )
            if version < SCHEMA_VERSION:
                self._db.executescript(_SCHEMA + f"PRAGMA user_version = {SCHEMA_VERSION};")
        except sqlite3.DatabaseError as err:
            raise InputFormatError(f"{self.path}: cannot use as the watch database: {err}") from None
        self._ids: dict[SeriesKey, int] = {
            SeriesKey(t, e, m): i
            for i, t, e, m in self._db.execute("SELECT id, target, engine, metric FROM series")
        }
        self._samples: list[Sample] = []
        self._scrapes: list[ScrapeRecord] = []
        self._ranks: dict[RankKey, str] = {}
        self._alerts: list[tuple[float, str, str, str, str]] = []
        self._failures = 0
        self._retry_at = 0.0
        self.flush_errors = 0
        self.last_error = ""
        self.recovered = self._recover_spill()

    # ----- writing ---------------------------------------------------------------------------------------
    def add(self, samples: Iterable[Sample]) -> None:
        self._samples.extend(samples)

    def add_scrape(self, record: ScrapeRecord) -> None:
        self._scrapes.append(record)

    def add_rank(self, rank: RankKey, model: str) -> None:
        self._ranks[rank] = model

    def add_alert(self, ts: float, detector: str, subject: str, severity: str, body: str) -> None:
        self._alerts.append((ts, detector, subject, severity, body))

    @property
    def pending(self) -> int:
        return len(self._samples) + len(self._scrapes) + len(self._alerts) + len(self._ranks)

    def flush(self, now: float, *, force: bool = False) -> FlushResult:
        """Write everything buffered in one transaction; on failure keep it all and retry later with backoff."""
        if not self.pending:
            return FlushResult(0, 0)
        if not force and now < self._retry_at:
            return FlushResult(0, self.pending, self.last_error)
        new_ids: dict[SeriesKey, int] = {}
        written = len(self._samples)
        try:
            self._db.execute("BEGIN IMMEDIATE")
            for key in {s.key for s in self._samples} - self._ids.keys():
                self._db.execute(
                    "INSERT OR IGNORE INTO series (target, engine, metric) VALUES (?, ?, ?)",
                    (key.target, key.engine, key.metric),
                )
                row = self._db.execute(
                    "SELECT id FROM series WHERE target=? AND engine=? AND metric=?",
                    (key.target, key.engine, key.metric),
                ).fetchone()
                new_ids[key] = int(row[0])
            ids = {**self._ids, **new_ids}
            self._db.executemany(
                "INSERT OR REPLACE INTO samples (series_id, ts, value) VALUES (?, ?, ?)",
                [(ids[s.key], s.ts, s.value) for s in self._samples],
            )
            self._db.executemany(
                "INSERT OR REPLACE INTO scrapes VALUES (?, ?, ?, ?, ?)",
                [(r.target, r.ts, int(r.ok), r.duration, r.error) for r in self._scrapes],
            )
            self._db.executemany(
                "INSERT OR REPLACE INTO ranks VALUES (?, ?, ?)",
                [(k.target, k.engine, m) for k, m in self._ranks.items()],
            )
            self._db.executemany("INSERT INTO alerts VALUES (?, ?, ?, ?, ?)", self._alerts)
            self._db.execute("COMMIT")
        except sqlite3.Error as err:
            self._rollback()
            self._failures += 1
            self.flush_errors += 1
            delay = min(RETRY_BASE_S * 2 ** (self._failures - 1), RETRY_MAX_S)
            self._retry_at = now + delay
            self.last_error = f"{type(err).__name__}: {err}"
            log.warning(
                "cannot write %s (%s); keeping %d records in memory, retrying in %.0f s",
                self.path,
                err,
                self.pending,
                delay,
            )
            return FlushResult(0, self.pending, self.last_error)
        if self._failures:
            log.warning("%s writable again: %d buffered records written", self.path, self.pending)
        self._ids.update(new_ids)
        self._samples, self._scrapes, self._alerts, self._ranks = [], [], [], {}
        self._failures, self._retry_at, self.last_error = 0, 0.0, ""
        return FlushResult(written, 0)

    def _rollback(self) -> None:
        try:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # SQLite may have rolled back by itself (SQLITE_FULL does)

    def close(self, now: float) -> FlushResult:
        """Flush; what still cannot be written goes to a JSON-lines file beside the database (or in the temp
        directory), which the next open reads back. `pending` counts what is lost only when both failed."""
        result = self.flush(now, force=True)
        if result.pending:
            spilled = self._spill()
            if spilled is not None:
                log.warning(
                    "%d records could not be written to %s; saved to %s and read back on the next run",
                    result.pending,
                    self.path,
                    spilled,
                )
                result = FlushResult(0, 0, f"{result.error}; saved to {spilled}")
        self._db.close()
        return result

    def _spill_paths(self) -> list[Path]:
        name = Path(self.path).name + SPILL_SUFFIX
        return [Path(self.path + SPILL_SUFFIX), Path(tempfile.gettempdir()) / name]

    def _spill(self) -> Path | None:
        lines = [json.dumps({"sample": [s.target, s.engine, s.metric, s.ts, s.value]}) for s in self._samples]
        lines += [json.dumps({"scrape": [r.target, r.ts, r.ok, r.duration, r.error]}) for r in self._scrapes]
        lines += [json.dumps({"rank": [k.target, k.engine, m]}) for k, m in self._ranks.items()]
        lines += [json.dumps({"alert": list(a)}) for a in self._alerts]
        for path in self._spill_paths():
            try:
                with open(path, "a", encoding="utf-8") as out:
                    out.write("\n".join(lines) + "\n")
                return path
            except OSError:
                continue
        return None

    def _recover_spill(self) -> int:
        """Re-queue records an earlier run could not write; drop the file once they are on disk."""
        count = 0
        for path in self._spill_paths():
            try:
                text = path.read_text(encoding="utf-8")
            except OSError:
                continue
            for line in text.splitlines():
                try:
                    record = json.loads(line)
                    if "sample" in record:
                        t, e, m, ts, v = record["sample"]
                        self._samples.append(Sample(str(t), str(e), str(m), float(ts), float(v)))
                    elif "scrape" in record:
                        t, ts, ok, d, err = record["scrape"]
                        self._scrapes.append(ScrapeRecord(str(t), float(ts), bool(ok), float(d), str(err)))
                    elif "rank" in record:
                        t, e, m = record["rank"]
                        self._ranks[RankKey(str(t), str(e))] = str(m)
                    elif "alert" in record:
                        ts, det, subj, sev, body = record["alert"]
                        self._alerts.append((float(ts), str(det), str(subj), str(sev), str(body)))
                    else:
                        continue
                    count += 1
                except (ValueError, TypeError, KeyError):
                    log.warning("%s: skipped an unreadable line", path)  # a line cut by a full disk
            if self.flush(0.0, force=True).pending == 0:
                path.unlink(missing_ok=True)
        return count

    # ----- reading ---------------------------------------------------------------------------------------
    def history(self, since: float, until: float | None = None) -> dict[SeriesKey, Series]:
        """All series from `since` on, stored and still buffered alike."""
        end = _FAR_FUTURE if until is None else until
        rows: list[Sample] = []
        for key, series_id in self._ids.items():
            for ts, value in self._db.execute(
                "SELECT ts, value FROM samples WHERE series_id=? AND ts>=? AND ts<=? ORDER BY ts",
                (series_id, since, end),
            ):
                rows.append(Sample(key.target, key.engine, key.metric, ts, value))
        rows.extend(s for s in self._samples if since <= s.ts <= end)
        return to_history(rows)

    def count_samples(self) -> int:
        stored = int(self._db.execute("SELECT count(*) FROM samples").fetchone()[0])
        return stored + len(self._samples)

    def ranks(self) -> dict[RankKey, str]:
        stored = {RankKey(t, e): m for t, e, m in self._db.execute("SELECT target, engine, model FROM ranks")}
        return {**stored, **self._ranks}

    def scrapes(self, target: str, since: float = 0.0) -> list[ScrapeRecord]:
        stored = [
            ScrapeRecord(t, ts, bool(ok), d, e)
            for t, ts, ok, d, e in self._db.execute(
                "SELECT target, ts, ok, duration, error FROM scrapes WHERE target=? AND ts>=? ORDER BY ts",
                (target, since),
            )
        ]
        buffered = [r for r in self._scrapes if r.target == target and r.ts >= since]
        return sorted(stored + buffered, key=lambda r: r.ts)

    def targets(self) -> list[str]:
        stored = [t for (t,) in self._db.execute("SELECT DISTINCT target FROM scrapes ORDER BY target")]
        return sorted(set(stored) | {r.target for r in self._scrapes})

    def gaps(self, target: str, since: float = 0.0) -> list[Gap]:
        return find_gaps(self.scrapes(target, since))


def find_gaps(records: list[ScrapeRecord]) -> list[Gap]:
    """Runs of failed scrapes, each closed by the next good one (or open when the target is still down)."""
    gaps: list[Gap] = []
    start: ScrapeRecord | None = None
    failures = 0
    for record in records:
        if not record.ok:
            if start is None:
                start, failures = record, 0
            failures += 1
        elif start is not None:
            gaps.append(Gap(record.target, start.ts, record.ts, failures, start.error))
            start = None
    if start is not None:
        gaps.append(Gap(start.target, start.ts, None, failures, start.error))
    return gaps
