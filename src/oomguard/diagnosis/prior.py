"""A learned prior over the cause classes: which classes similar reports had, from the words of the facts'
lines and the typed facts the readers extract. It orders the causes after the rules' first one (the first
stays the rules'); see `diagnosis.py`.

The model is a multinomial logistic regression trained by `bench/train_prior.py` on the development reports
and the tuning part of the corpus (never the frozen part); its weights ship in `data/prior.json` and are
scored here in pure Python (a softmax over summed weights), so `diagnose` needs no numerical library."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from oomguard.diagnosis.evidence import (
    Evidence,
    Flags,
    Frame,
    GpuProcess,
    HostMemory,
    LoadSample,
    OomMessage,
    ScheduledStep,
    Signal,
    Snapshot,
    StartupNumber,
    Version,
)
from oomguard.diagnosis.rules import Situation, frame_category, outside_pytorch
from oomguard.diagnosis.setup import EngineSetup
from oomguard.units import GiB as GIB

PRIOR_FILE = "prior.json"
# Words kept per fact line (a pasted 400-character line holds ~60).
MAX_WORDS_PER_LINE = 80

# Log prefixes: timestamps, levels, `[file.py:123]`, process tags; none says anything about the cause.
_PREFIX = re.compile(
    r"^\s*(?:\(\w+(?:_\w+)*\s+pid=\d+(?:,\s*ip=[\d.]+)?\)\s*)?"
    r"(?:\[?\d{4}-\d\d-\d\d[T ][\d:.,]+Z?\]?\s*|\[?\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\]?\s*)?"
)
_HEX = re.compile(r"\b0x[0-9a-f]+\b|\b[0-9a-f]{12,}\b")
_PATH = re.compile(r"(?:[\w.-]*/)+([\w.-]+)")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_WORD = re.compile(r"[a-z][a-z0-9_]+")


def words(line: str) -> list[str]:
    """A fact's line as the prior reads it: lower case, no log prefix, paths reduced to their last part,
    hex and numbers masked out (they name the reporter's setup, not the mechanism)."""
    text = _PREFIX.sub("", line.lower())
    text = _HEX.sub(" ", text)
    text = _PATH.sub(r" \1 ", text)
    text = _NUMBER.sub(" ", text)
    return _WORD.findall(text)[:MAX_WORDS_PER_LINE]


def _band(value: float, edges: tuple[float, ...]) -> int:
    """The index of the first edge above value (len(edges) when none)."""
    for i, edge in enumerate(edges):
        if value < edge:
            return i
    return len(edges)


def _oom_features(o: OomMessage) -> list[str]:
    out = [f"oom:{o.flavor}"]
    if o.requested is not None:
        out.append(f"oom:request-gib-band={_band(o.requested / GIB, (0.05, 0.5, 2, 8, 32))}")
        if o.total and o.requested > o.total:
            out.append("oom:request>total")
        if o.free is not None and o.total:
            out.append(f"oom:free-share-band={_band(o.free / o.total, (0.01, 0.05, 0.2))}")
        if o.reserved_unallocated is not None:
            out.append(
                "oom:unallocated/request-band="
                + str(_band(o.reserved_unallocated / max(o.requested, 1), (0.1, 1)))
            )
    outside = outside_pytorch(o)
    if outside is not None and o.total:
        out.append(f"oom:outside-share-band={_band(outside / o.total, (0.05, 0.15, 0.5))}")
    if o.processes:
        out.append(f"oom:processes={min(len(o.processes), 3)}")
    if o.private_pools:
        out.append("oom:private-pools")
    if o.process_tag:
        out.append("oom:tagged")
    return out


def features(ev: Evidence, sit: Situation, setup: EngineSetup) -> list[str]:
    """The features of one diagnosis: words of the facts' lines (each line once) and typed facts."""
    found: set[str] = set()
    seen_lines: set[str] = set()
    for fact in ev:
        if fact.text not in seen_lines:
            seen_lines.add(fact.text)
            found.update(f"w:{w}" for w in words(fact.text))
        found.add(f"fact:{type(fact).__name__}")
        if isinstance(fact, Signal):
            found.add(f"signal:{fact.name}")
        elif isinstance(fact, OomMessage):
            found.update(_oom_features(fact))
        elif isinstance(fact, Frame):
            category = frame_category(fact)
            if category:
                found.add(f"frame:{category}")
        elif isinstance(fact, StartupNumber):
            found.add(f"startup:{fact.quantity}")
        elif isinstance(fact, HostMemory):
            found.add(f"host:{fact.quantity}")
        elif isinstance(fact, Flags):
            found.update(f"flag:{key}" for key, _ in fact.flags)
        elif isinstance(fact, Version):
            found.add(f"version:{fact.engine}")
    crash = sit.kv_at_crash
    if crash is not None and crash.kv_usage is not None:
        found.add(f"kv-at-crash-band={_band(crash.kv_usage, (0.6, 0.9))}")
    for kind in (LoadSample, ScheduledStep, GpuProcess, Snapshot):
        if ev.count(kind):
            found.add(f"has:{kind.__name__}")
    found.add(f"phase:{sit.phase}")
    found.add(f"engine:{setup.engine}")
    found.add(f"gpu-failure:{sit.gpu_failure}")
    return sorted(found)


@dataclass(frozen=True)
class Prior:
    """A trained prior: per class an intercept and per feature one weight for each class."""

    classes: tuple[str, ...]
    intercepts: tuple[float, ...]
    weights: dict[str, tuple[float, ...]]
    meta: dict[str, Any]

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Prior:
        classes = tuple(str(c) for c in payload["classes"])
        weights = {str(f): tuple(float(w) for w in ws) for f, ws in payload["weights"].items()}
        return cls(classes, tuple(float(b) for b in payload["intercepts"]), weights, dict(payload["meta"]))

    def shares(self, feats: list[str]) -> dict[str, float]:
        """The probability of each class given the features (a softmax over the summed weights)."""
        logits = list(self.intercepts)
        for f in feats:
            ws = self.weights.get(f)
            if ws is not None:
                logits = [a + w for a, w in zip(logits, ws, strict=True)]
        top = max(logits)
        exps = [math.exp(x - top) for x in logits]
        total = sum(exps)
        return {c: e / total for c, e in zip(self.classes, exps, strict=True)}


@cache
def shipped() -> Prior:
    """The prior shipped with the package (`data/prior.json`)."""
    text = resources.files("oomguard.diagnosis").joinpath("data", PRIOR_FILE).read_text("utf-8")
    return Prior.from_payload(json.loads(text))
