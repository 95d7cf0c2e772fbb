"""The `host` object of `--json`: the node's host-memory ledger, its steps, limits, verdict and fixes."""

from __future__ import annotations

from typing import Any

from oomguard.host.ledger import HostLedger
from oomguard.units import GiB


def _gib(num_bytes: float) -> float:
    return round(num_bytes / GiB, 4)


def host_to_dict(ledger: HostLedger) -> dict[str, Any]:
    limits = ledger.limits
    dies_at = ledger.dies_at
    return {
        "node": ledger.node,
        "verdict": ledger.verdict.value,
        "fits": ledger.fits,
        "dies_at": dies_at.value if dies_at else None,
        "peak_gib": _gib(ledger.peak_bytes),
        "peak_band_gib": _gib(ledger.peak_band),
        "peak_step": ledger.peak_step.value,
        "limit_that_fits_gib": _gib(ledger.limit_that_fits),
        "limits": {
            "memory_limit_gib": None if limits.memory_limit is None else _gib(limits.memory_limit),
            "memory_request_gib": None if limits.memory_request is None else _gib(limits.memory_request),
            "request_below_serving_use": ledger.request_below_steady,
            "shm_gib": None if limits.shm is None or limits.shm.bytes is None else _gib(limits.shm.bytes),
            "shm_source": limits.shm.source if limits.shm else None,
            "source": limits.source,
        },
        "shm_needed_gib": _gib(ledger.shm_needed),
        "shm_fits": ledger.shm_fits,
        "load_workers_at_once": ledger.load_workers_at_once,
        "load_peak_per_worker_gib": _gib(ledger.per_worker_load_peak),
        "processes": [{"role": p.role, "count": p.count, "note": p.note} for p in ledger.processes],
        "steps": [
            {"step": s.value, "used_gib": _gib(ledger.used_at(s)), "band_gib": _gib(ledger.band_at(s))}
            for s in ledger.steps
        ],
        "lines": [
            {
                "key": line.key,
                "label": line.label,
                "step": line.step.value,
                "count": line.count,
                "each_gib": _gib(line.bytes_each),
                "gib": _gib(line.bytes),
                "band_gib": _gib(line.band),
                "kind": line.kind,
                "source": line.source,
                "transient": line.transient,
                "shm": line.shm,
                "reclaimable": line.reclaimable,
            }
            for line in ledger.lines
        ],
        "fixes": [{"summary": f.summary, "detail": f.detail} for f in ledger.fixes],
        "notes": list(ledger.notes),
    }
