"""The host ledger as text: the processes, each line with its provenance, the sum per step, the verdict."""

from __future__ import annotations

from oomguard.host.ledger import HostLedger, HostVerdict
from oomguard.units import GiB, MiB


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GiB:8.2f} GiB"


def _provenance(kind: str, band: int) -> str:
    return f"{kind} +-{band / GiB:.2f}" if band else kind


def render_host(ledger: HostLedger, *, verbose: bool = False) -> str:
    out: list[str] = [f"Host memory ({ledger.node}):"]
    out.append("  processes: " + ", ".join(f"{p.count} x {p.role}" for p in ledger.processes))
    for line in ledger.lines:
        if line.bytes == 0 and not verbose:
            continue
        count = f"{line.count} x {line.bytes_each / GiB:.2f}" if line.count > 1 else ""
        flags = " [/dev/shm]" if line.shm else " [page cache, reclaimable]" if line.reclaimable else ""
        when = f"{line.step.value}{' only' if line.transient else ''}"
        out.append(
            f"  {line.label:<38}{_gib(line.bytes)} {count:<14} {when:<13} "
            f"{_provenance(line.kind, line.band)}{flags}"
        )
        if verbose:
            out.append(f"      {line.source}")
    out.append(
        "  held at each step: "
        + "; ".join(f"{s.value} {ledger.used_at(s) / GiB:.1f} GiB" for s in ledger.steps)
    )
    limits = ledger.limits
    if limits.memory_limit is not None:
        out.append(f"  limit: {limits.memory_limit / GiB:.2f} GiB ({limits.source})")
    if limits.shm is not None:
        size = "unbounded" if limits.shm.bytes is None else f"{limits.shm.bytes / MiB:.0f} MiB"
        out.append(f"  /dev/shm: needs {ledger.shm_needed / MiB:.0f} MiB, has {size} ({limits.shm.source})")
    out.append(_verdict_line(ledger))
    if ledger.request_below_steady and limits.memory_request is not None:
        out.append(
            f"  note: requests.memory {limits.memory_request / GiB:.1f} GiB is below what the server holds "
            "while serving: the pod is first in line for eviction under node pressure"
        )
    for fix in ledger.fixes:
        out.append(f"  fix: {fix.summary}" + (f"  ({fix.detail})" if fix.detail else ""))
    for note in ledger.notes:
        out.append(f"  note: {note}")
    return "\n".join(out) + "\n"


def host_section(ledger: HostLedger, *, verbose: bool = False) -> list[str]:
    """The whole ledger when a limit or /dev/shm size is known (or asked for); else one summary line."""
    limits = ledger.limits
    if verbose or limits.memory_limit is not None or limits.shm is not None:
        return render_host(ledger, verbose=verbose).rstrip("\n").splitlines()
    roles = ", ".join(f"{p.count} x {p.role}" for p in ledger.processes)
    summary = (
        f"Host memory: peak {ledger.peak_bytes / GiB:.1f} GiB +-{ledger.peak_band / GiB:.1f} at "
        f"{ledger.peak_step.label} ({roles}); --host-memory SIZE checks it against a limit, -v lists it"
    )
    return [summary]


def _verdict_line(ledger: HostLedger) -> str:
    peak = (
        f"peak {ledger.peak_bytes / GiB:.1f} GiB +-{ledger.peak_band / GiB:.1f} at {ledger.peak_step.label}"
    )
    verdict = ledger.verdict
    if verdict is HostVerdict.OOM_KILLED and ledger.dies_at is not None:
        text = f"WILL BE OOM-KILLED while {ledger.dies_at.label} ({peak})"
    elif verdict is HostVerdict.NO_LIMIT:
        text = f"no memory limit given ({peak}; a limit of {ledger.limit_that_fits // GiB}Gi fits)"
    else:
        text = f"{verdict.value} ({peak})"
    if ledger.shm_fits is False:
        text += "; /dev/shm too small: the server fails at startup"
    return "  host verdict: " + text
