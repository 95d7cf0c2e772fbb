"""The host ledger's arithmetic: steps, transient and reclaimable lines, the verdict and where it dies."""

from __future__ import annotations

from oomguard.host.ledger import (
    MARGINAL_HEADROOM_BYTES,
    HostLedger,
    HostLimits,
    HostLine,
    HostStep,
    HostVerdict,
    ShmSize,
)
from oomguard.kinds import Provenance
from oomguard.units import GiB, MiB


def _line(key: str, gib: float, step: HostStep, count: int = 1, **kw: object) -> HostLine:
    return HostLine(key, key, int(gib * GiB), count, Provenance.EXACT, "test", step, **kw)  # type: ignore[arg-type]


LINES = (
    _line("baseline", 2, HostStep.STARTUP, count=4),
    _line("queues", 0.5, HostStep.STARTUP, shm=True),
    _line("load", 10, HostStep.LOAD, count=4, transient=True),
    _line("page_cache", 140, HostStep.LOAD, reclaimable=True),
    _line("tokens", 0.5, HostStep.INIT, count=4),
    _line("mm", 4, HostStep.SERVING, count=2),
)


def _ledger(
    limit_gib: float | None, shm: ShmSize | None = None, lines: tuple[HostLine, ...] = LINES
) -> HostLedger:
    limit = None if limit_gib is None else int(limit_gib * GiB)
    return HostLedger("node", (), lines, HostLimits(limit, None, shm))


def test_each_step_holds_the_lines_from_its_step_on_and_transients_only_during_it() -> None:
    ledger = _ledger(None)
    assert ledger.used_at(HostStep.STARTUP) == int(8.5 * GiB)
    assert ledger.used_at(HostStep.LOAD) == int(48.5 * GiB)  # + 4 workers x 10 GiB, never the page cache
    assert ledger.used_at(HostStep.INIT) == int(10.5 * GiB)  # the load peak is gone
    assert ledger.used_at(HostStep.SERVING) == int(18.5 * GiB)
    assert ledger.peak_step is HostStep.LOAD and ledger.peak_bytes == int(48.5 * GiB)
    assert HostStep.SLEEP not in ledger.steps
    assert ledger.verdict is HostVerdict.NO_LIMIT and ledger.dies_at is None


def test_verdict_names_the_first_step_that_crosses_the_limit() -> None:
    assert _ledger(40).dies_at is HostStep.LOAD
    assert _ledger(40).verdict is HostVerdict.OOM_KILLED
    assert _ledger(16).dies_at is HostStep.LOAD
    assert _ledger(64).verdict is HostVerdict.FITS


def test_a_fit_within_the_headroom_is_marginal() -> None:
    tight = 48.5 + MARGINAL_HEADROOM_BYTES / GiB / 2
    assert _ledger(tight).verdict is HostVerdict.MARGINAL


def test_bands_can_make_a_fit_marginal() -> None:
    lines = (_line("baseline", 2, HostStep.STARTUP, count=4, band_each=GiB),)
    assert _ledger(11.5, lines=lines).verdict is HostVerdict.MARGINAL  # 8 GiB + 4 GiB of band
    assert _ledger(13.5, lines=lines).verdict is HostVerdict.FITS


def test_serving_cache_can_be_the_step_that_dies() -> None:
    lines = (_line("baseline", 2, HostStep.STARTUP, count=4), _line("mm", 4, HostStep.SERVING, count=2))
    ledger = _ledger(12, lines=lines)
    assert ledger.dies_at is HostStep.SERVING
    assert ledger.fixes[0].summary == "raise the memory limit to 17Gi"  # 16 GiB + 1 GiB headroom


def test_shm_needs_are_checked_against_the_shm_size() -> None:
    assert _ledger(64, ShmSize(64 * MiB, "runtime")).shm_fits is False
    assert _ledger(64, ShmSize(1 * GiB, "emptyDir")).shm_fits is True
    assert _ledger(64, ShmSize(None, "hostIPC")).shm_fits is None
    small = _ledger(64, ShmSize(64 * MiB, "runtime"))
    assert not small.fits
    assert any("/dev/shm" in fix.summary for fix in small.fixes)


def test_request_below_the_serving_use_is_flagged() -> None:
    ledger = HostLedger("node", (), LINES, HostLimits(64 * GiB, 8 * GiB, None))
    assert ledger.request_below_steady
