"""Samples on disk: one SQLite file (WAL), versioned schema, batched writes that never drop a good sample.

Every sample is checked before it is buffered (`Sample.problem`: typed, finite, in range); a bad one is
counted and dropped with a message, so it can never poison a transaction. Writes are buffered in memory and
flushed in one transaction. When a flush fails (disk full, I/O error, another writer holding the lock) the
transaction rolls back, the buffer is kept, the failure is reported and the flush is retried with backoff.

What cannot be written is appended to a spill file, a JSON-lines file beside the database or, when that
directory cannot be written, in the user's state directory under a name derived from the database's
absolute path; the file is private (0600), and one not owned by the user is neither read nor written. It
is written at exit (the CLI turns SIGTERM and SIGHUP into a normal exit) and whenever the buffer passes
`MAX_PENDING` records, so memory stays bounded while the disk is full. It is imported in batches on the next
open (or after the next good flush) and deleted once every batch is on disk; records that were already
written (a crash between commit and delete) are not stored twice.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import operator
import os
import sqlite3
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    ts REAL NOT NULL, detector TEXT NOT NULL, subject TEXT NOT NULL, severity TEXT NOT NULL,
    body TEXT NOT NULL);
"""
LOCK_TIMEOUT_S = 1.0  # wait this long for another writer before treating the flush as failed
RETRY_BASE_S = 1.0
RETRY_MAX_S = 60.0
_FAR_FUTURE = 1e300
SPILL_SUFFIX = ".unsaved.jsonl"
# Past this many buffered records (about 100 MB) a failing store moves its buffer to the spill file.
MAX_PENDING = 500_000
IMPORT_BATCH = 50_000  # spill records read back per transaction
MAX_REJECTION_MESSAGES = 5  # per store: then only counted

AlertRow = tuple[float, str, str, str, str]


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


def state_dir() -> Path:
    """The user's state directory ($XDG_STATE_HOME, else ~/.local/state) for oomguard."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "oomguard"


def spill_paths(db_path: str) -> list[Path]:
    """Beside the database first; else the state directory, named by the database's absolute identity."""
    absolute = os.path.realpath(db_path)
    digest = hashlib.sha256(absolute.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    fallback = state_dir() / "unsaved" / f"{os.path.basename(absolute)}-{digest}{SPILL_SUFFIX}"
    return [Path(absolute + SPILL_SUFFIX), fallback]


def _is_private(info: os.stat_result) -> bool:
    """A regular file of ours that nobody else can write: safe to read records from."""
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022


def _open_private_append(path: Path) -> int:
    """An fd to append to `path`, created 0600; refuses links, other owners and files others can write."""
    if path.parent != Path(path.anchor) and not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    if not _is_private(os.fstat(fd)):
        os.close(fd)
        raise PermissionError(f"{path} is not a private file of this user")
    return fd


def _record_lines(
    samples: Iterable[Sample],
    scrapes: Iterable[ScrapeRecord],
    ranks: dict[RankKey, str],
    alerts: Iterable[AlertRow],
) -> Iterator[str]:
    for s in samples:
        yield json.dumps({"sample": [s.target, s.engine, s.metric, s.ts, s.value]}, allow_nan=False)
    for r in scrapes:
        yield json.dumps({"scrape": [r.target, r.ts, r.ok, r.duration, r.error]}, allow_nan=False)
    for k, m in ranks.items():
        yield json.dumps({"rank": [k.target, k.engine, m]})
    for a in alerts:
        yield json.dumps({"alert": list(a)}, allow_nan=False)


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
            self._ids: dict[SeriesKey, int] = {
                SeriesKey(t, e, m): i
                for i, t, e, m in self._db.execute("SELECT id, target, engine, metric FROM series")
            }
        except sqlite3.DatabaseError as err:
            raise InputFormatError(
                f"{self.path}: cannot use as the watch database ({err}); move it aside and start a new one"
            ) from None
        self._samples: dict[tuple[SeriesKey, float], float] = {}  # one value per series and timestamp
        self._scrapes: dict[tuple[str, float], ScrapeRecord] = {}
        self._ranks: dict[RankKey, str] = {}
        self._alerts: dict[AlertRow, None] = {}  # an ordered set
        self._failures = 0
        self._retry_at = 0.0
        self.flush_errors = 0
        self.last_error = ""
        self.rejected = 0  # samples refused before buffering (not finite, wrong type, out of range)
        self.spilled = 0  # records moved to the spill file while running
        self._spill_waiting = True  # a spill file may exist: import it after the next good flush
        self._importing = False
        self.recovered = self._recover_spill()

    # ----- writing ---------------------------------------------------------------------------------------
    def add(self, samples: Iterable[Sample]) -> list[Sample]:
        """Buffer the samples that can be stored; returns them (the others are counted and dropped)."""
        accepted = []
        for sample in samples:
            problem = sample.problem()
            if problem:
                self._reject(sample, problem)
                continue
            self._samples[(sample.key, float(sample.ts))] = float(sample.value)
            accepted.append(sample)
        return accepted

    def _reject(self, sample: Sample, problem: str) -> None:
        self.rejected += 1
        if self.rejected <= MAX_REJECTION_MESSAGES:
            log.warning(
                "dropped a sample of %s (%s engine %r): %s%s",
                str(sample.metric)[:80],
                str(sample.target)[:200],
                str(sample.engine)[:80],
                problem,
                "; further ones are only counted" if self.rejected == MAX_REJECTION_MESSAGES else "",
            )

    def add_scrape(self, record: ScrapeRecord) -> None:
        self._scrapes[(record.target, record.ts)] = record

    def add_rank(self, rank: RankKey, model: str) -> None:
        self._ranks[rank] = model

    def add_alert(self, ts: float, detector: str, subject: str, severity: str, body: str) -> None:
        self._alerts[(ts, detector, subject, severity, body)] = None

    @property
    def pending(self) -> int:
        return len(self._samples) + len(self._scrapes) + len(self._alerts) + len(self._ranks)

    def _buffered_samples(self) -> Iterator[Sample]:
        for (key, ts), value in self._samples.items():
            yield Sample(key.target, key.engine, key.metric, ts, value)

    def flush(self, now: float, *, force: bool = False) -> FlushResult:
        """Write everything buffered in one transaction; on failure keep it all and retry later with
        backoff."""
        if not self.pending:
            return self._after_good_flush(FlushResult(0, 0))
        if not force and now < self._retry_at:
            return FlushResult(0, self.pending, self.last_error)
        new_ids: dict[SeriesKey, int] = {}
        written = len(self._samples)
        try:
            self._db.execute("BEGIN IMMEDIATE")
            for key in {key for key, _ in self._samples} - self._ids.keys():
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
                [(ids[key], ts, value) for (key, ts), value in self._samples.items()],
            )
            self._db.executemany(
                "INSERT OR REPLACE INTO scrapes VALUES (?, ?, ?, ?, ?)",
                [(r.target, r.ts, int(r.ok), r.duration, r.error) for r in self._scrapes.values()],
            )
            self._db.executemany(
                "INSERT OR REPLACE INTO ranks VALUES (?, ?, ?)",
                [(k.target, k.engine, m) for k, m in self._ranks.items()],
            )
            # The alerts table has no key: an alert read back from a spill file may already be there.
            self._db.executemany(
                "INSERT INTO alerts SELECT ?1, ?2, ?3, ?4, ?5 WHERE NOT EXISTS (SELECT 1 FROM alerts "
                "WHERE ts=?1 AND detector=?2 AND subject=?3 AND severity=?4 AND body=?5)",
                list(self._alerts),
            )
            self._db.execute("COMMIT")
        except sqlite3.Error as err:
            return self._failed_flush(now, err)
        if self._failures:
            log.warning("%s writable again: %d buffered records written", self.path, self.pending)
        self._ids.update(new_ids)
        self._samples, self._scrapes, self._alerts, self._ranks = {}, {}, {}, {}
        self._failures, self._retry_at, self.last_error = 0, 0.0, ""
        return self._after_good_flush(FlushResult(written, 0))

    def _failed_flush(self, now: float, err: sqlite3.Error) -> FlushResult:
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
        if self.pending > MAX_PENDING:  # bounded memory: the buffer moves to disk elsewhere
            moved = self.pending
            if self._spill() is not None:
                self.spilled += moved
        return FlushResult(0, self.pending, self.last_error)

    def _after_good_flush(self, result: FlushResult) -> FlushResult:
        if self._spill_waiting and not self._importing:
            self._recover_spill()
        return result

    def _rollback(self) -> None:
        try:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # SQLite may have rolled back by itself (SQLITE_FULL does)

    def close(self, now: float) -> FlushResult:
        """Flush; what still cannot be written goes to the spill file, which the next open reads back.
        `pending` counts what is lost only when both failed."""
        result = self.flush(now, force=True)
        if result.pending:
            pending = result.pending
            spilled = self._spill()
            if spilled is not None:
                log.warning(
                    "%d records could not be written to %s; saved to %s and read back on the next run",
                    pending,
                    self.path,
                    spilled,
                )
                result = FlushResult(0, 0, f"{result.error}; saved to {spilled}")
        self._db.close()
        return result

    # ----- the spill file ------------------------------------------------------------------------------
    def _spill(self) -> Path | None:
        """Append the whole buffer to the first spill file that can be written; empty the buffer."""
        lines = _record_lines(self._buffered_samples(), self._scrapes.values(), self._ranks, self._alerts)
        text = ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")
        for path in spill_paths(self.path):
            try:
                fd = _open_private_append(path)
            except OSError as err:
                log.debug("spill to %s: %s", path, err)
                continue
            try:
                view = memoryview(text)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except OSError as err:
                log.warning("cannot save unwritten records to %s: %s", path, err)
                continue  # a partial last line is skipped on import
            finally:
                os.close(fd)
            self._samples, self._scrapes, self._alerts, self._ranks = {}, {}, {}, {}
            self._spill_waiting = True
            return path
        return None

    def _recover_spill(self) -> int:
        """Import records an earlier run could not write, a batch per transaction; delete each file once all
        of it is on disk. A failing batch stays in the file (and out of memory) for a later try."""
        self._spill_waiting = False
        if self.pending:
            self._spill_waiting = True  # import only into an empty buffer, so a failure loses nothing
            return 0
        count = 0
        self._importing = True
        try:
            for path in spill_paths(self.path):
                imported = self._import(path)
                if imported is None:
                    self._spill_waiting = True
                    break
                count += imported
        finally:
            self._importing = False
        return count

    def _import(self, path: Path) -> int | None:
        """Records imported from `path` (0 when there is none to trust); None when a batch failed."""
        try:
            info = os.lstat(path)
        except OSError:
            return 0
        if not _is_private(info):
            log.warning(
                "%s: not a private file of this user; not imported (move it away to silence this)", path
            )
            return 0
        count = 0
        try:
            with open(path, encoding="utf-8", errors="surrogateescape") as lines:
                batch = 0
                for line in lines:
                    if self._queue_record(line, path):
                        count += 1
                        batch += 1
                    if batch >= IMPORT_BATCH:
                        if self.flush(0.0, force=True).pending:
                            self._abandon_import()
                            return None
                        batch = 0
        except OSError as err:
            log.warning("%s: cannot read (%s)", path, err)
            self._abandon_import()
            return None
        if self.flush(0.0, force=True).pending:
            self._abandon_import()
            return None
        path.unlink(missing_ok=True)
        return count

    def _abandon_import(self) -> None:
        self._samples, self._scrapes, self._alerts, self._ranks = {}, {}, {}, {}  # still in the file

    def _queue_record(self, line: str, path: Path) -> bool:
        try:
            record = json.loads(line)
            if "sample" in record:
                t, e, m, ts, v = record["sample"]
                before = self.rejected
                self.add([Sample(str(t), str(e), str(m), float(ts), float(v))])
                return self.rejected == before
            if "scrape" in record:
                t, ts, ok, d, err = record["scrape"]
                self.add_scrape(ScrapeRecord(str(t), float(ts), bool(ok), float(d), str(err)))
            elif "rank" in record:
                t, e, m = record["rank"]
                self._ranks[RankKey(str(t), str(e))] = str(m)
            elif "alert" in record:
                ts, det, subj, sev, body = record["alert"]
                self.add_alert(float(ts), str(det), str(subj), str(sev), str(body))
            else:
                return False
            return True
        except (ValueError, TypeError, KeyError, RecursionError):
            log.warning("%s: skipped an unreadable line", path)  # a line cut by a full disk
            return False

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
        rows.extend(s for s in self._buffered_samples() if since <= s.ts <= end)
        return to_history(rows)

    def stored_between(
        self, since: float, until: float
    ) -> Iterator[tuple[SeriesKey, list[float], list[float]]]:
        """Stored samples with `since` <= ts < `until`, series by series (in the order they were first
        stored), each in time order. Each series is one range read on the primary key: a slice of the
        history costs its own rows, not the table's."""
        for key, series_id in sorted(self._ids.items(), key=operator.itemgetter(1)):
            rows = self._read(
                "SELECT ts, value FROM samples WHERE series_id=? AND ts>=? AND ts<? ORDER BY ts",
                (series_id, since, until),
            )
            if rows:
                yield key, [ts for ts, _ in rows], [value for _, value in rows]

    def newest_stored(self) -> float | None:
        """The time of the newest stored sample (one primary-key read per series), None when none is."""
        newest = None
        for series_id in self._ids.values():
            row = self._read("SELECT max(ts) FROM samples WHERE series_id=?", (series_id,))
            if row and row[0][0] is not None and (newest is None or row[0][0] > newest):
                newest = float(row[0][0])
        return newest

    def buffered_since(self, since: float) -> list[Sample]:
        """Samples not yet stored (a spill file read back at start, this run's scrapes) from `since` on."""
        return [s for s in self._buffered_samples() if s.ts >= since]

    def recent(self, since: float) -> dict[SeriesKey, tuple[list[float], list[float]]]:
        """Every stored and buffered sample from `since` on, per series in time order: the window's seed,
        read in one query."""
        names = {i: key for key, i in self._ids.items()}
        out: dict[SeriesKey, tuple[list[float], list[float]]] = {}
        rows = self._read(
            "SELECT series_id, ts, value FROM samples WHERE ts>=? ORDER BY series_id, ts", (since,)
        )
        for series_id, group in itertools.groupby(rows, key=operator.itemgetter(0)):
            key = names.get(series_id)
            if key is not None:
                points = list(group)
                out[key] = ([ts for _, ts, _ in points], [v for _, _, v in points])
        for (key, ts), value in sorted(self._samples.items()):
            if ts >= since:
                ts_list, values = out.setdefault(key, ([], []))
                ts_list.append(ts)
                values.append(value)
        return out

    def _read(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        """A query whose failure is the user's to fix (a corrupted file), said in one line."""
        try:
            return self._db.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as err:
            raise InputFormatError(
                f"{self.path}: cannot read the watch database ({err}); move it aside and start a new one"
            ) from None

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
        buffered = [r for r in self._scrapes.values() if r.target == target and r.ts >= since]
        return sorted(stored + buffered, key=lambda r: r.ts)

    def targets(self) -> list[str]:
        stored = [t for (t,) in self._db.execute("SELECT DISTINCT target FROM scrapes ORDER BY target")]
        return sorted(set(stored) | {r.target for r in self._scrapes.values()})

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
