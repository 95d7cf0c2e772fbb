"""A learned prior over the cause classes: which classes similar reports had, from the typed facts the
readers extract (allocator quantities as shares of the device, phase, signals, frames, the setup) and, at a
lower value, the words of the facts' lines. `diagnosis.rank` blends it with the rules' confidence by one
weight shipped with it (`blend_weight`; at 0 the first cause is the rules' and the prior orders the rest).

The model is a multinomial logistic regression trained by `bench/train_prior.py` on the development reports
and the tuning part of the corpus (never the frozen part), with a temperature fitted by cross-validation on
the tuning part; its weights ship in `data/prior.json` and are scored here in pure Python (a softmax over the
summed weights times the features' values, over the temperature), so `diagnose` needs no numerical
library."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from oomguard.diagnosis.evidence import (
    DeviceNamed,
    Evidence,
    Flags,
    Frame,
    GpuProcess,
    HostMemory,
    LeverTried,
    LoadSample,
    ModelNamed,
    OomMessage,
    ScheduledStep,
    Signal,
    Snapshot,
    StartupNumber,
    Version,
)
from oomguard.diagnosis.rules import Situation, frame_category, other_process_bytes, outside_pytorch
from oomguard.diagnosis.setup import EngineSetup
from oomguard.units import GiB as GIB

PRIOR_FILE = "prior.json"
# Words kept per fact line (a pasted 400-character line holds ~60).
MAX_WORDS_PER_LINE = 80
# The value a word feature enters the model with (typed facts enter with 1). A report's lines carry dozens
# of words, most of them naming the reporter's setup or sentence, against a handful of typed facts that name
# the mechanism; at full value the words outvote the facts and the prior learns the reports it was trained
# on. Cross-validated on the tuning part (bench/prior_cv.py): 0.1-0.25 score alike, 1 ~9 points lower top-1.
WORD_VALUE = 0.2
# Word features: "w:" a word of a fact's line, "r:" a word anywhere in a document's head (a reporter's
# sentences, the lines no reader took). On rounds of the corpus left out of its training, the words of the
# heads add about one point of top-1 to the prior alone.
WORD_PREFIXES = ("w:", "r:")

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


def _share_band(part: float, whole: float, edges: tuple[float, ...]) -> int:
    return _band(part / whole, edges)


def _oom_features(o: OomMessage) -> list[str]:
    out = [f"oom:{o.flavor}"]
    if o.requested is not None:
        out.append(f"oom:request-gib-band={_band(o.requested / GIB, (0.05, 0.5, 2, 8, 32))}")
        if o.total and o.requested > o.total:
            out.append("oom:request>total")
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
    if o.total:
        out += _oom_shares(o, o.total)
    return out


def _oom_shares(o: OomMessage, total: int) -> list[str]:
    """The allocator's quantities as shares of the device, in bands: what decides the class is how big a
    request is against the device and against what is free, how much of the device PyTorch holds but has not
    allocated (fragmentation), how much other processes hold, not the bytes of one reporter's GPU."""
    out: list[str] = []
    if o.requested is not None:
        out.append(f"oom:request/total={_share_band(o.requested, total, (0.005, 0.02, 0.1, 0.3, 1))}")
        if o.free is not None:
            out.append(f"oom:request/free={_band(o.requested / max(o.free, 1), (1.5, 10, 100))}")
    if o.free is not None:
        out.append(f"oom:free/total={_share_band(o.free, total, (0.01, 0.05, 0.2))}")
    if o.reserved_unallocated is not None:
        out.append(f"oom:unallocated/total={_share_band(o.reserved_unallocated, total, (0.01, 0.05, 0.15))}")
    if o.allocated is not None:
        out.append(f"oom:allocated/total={_share_band(o.allocated, total, (0.3, 0.6, 0.85))}")
    others = other_process_bytes(o)
    if others is not None:
        out.append(f"oom:others/total={_share_band(others, total, (0.02, 0.1, 0.3))}")
    if o.private_pools:
        out.append(f"oom:pools/total={_share_band(o.private_pools, total, (0.02, 0.1))}")
    return out


def _setup_features(setup: EngineSetup) -> list[str]:
    """The recovered setup in bands: the context it must hold, the share of the device it may use, whether it
    is split over GPUs, the device's size, and what the engine logged it measured, as shares of the device."""
    out: list[str] = []
    max_len = setup.flag_int("max_model_len")
    if max_len:
        out.append(f"setup:max-model-len-band={_band(max_len, (8192, 32768, 131072))}")
    utilization = setup.flag_float("gpu_memory_utilization")
    if utilization:
        out.append(f"setup:utilization-band={_band(utilization, (0.8, 0.9, 0.95))}")
    if setup.parallel("tensor_parallel_size") > 1:
        out.append("setup:tensor-parallel")
    total = setup.gpu_total_bytes
    if total:
        out.append(f"setup:gpu-gib-band={_band(total / GIB, (20, 30, 50, 90))}")
        for term, value in sorted(setup.measured.items()):
            out.append(f"setup:{term}/total={_share_band(value, total, (0.05, 0.2, 0.5, 0.8))}")
        weights = setup.weights
        if weights is not None and (weights.split.stated or weights.split.ranks > 1):
            # The weights one GPU holds (sizing.py: model size, precision, split) against the device.
            out.append(f"setup:weights/total={_share_band(weights.bytes, total, (0.5, 0.8, 0.92, 1.0))}")
        if setup.other_processes_bytes:
            out.append(
                f"setup:others/total={_share_band(setup.other_processes_bytes, total, (0.02, 0.1, 0.3))}"
            )
    return out


def value(feature: str) -> float:
    """The value a present feature enters the model with (WORD_VALUE for a word, 1 for a typed fact)."""
    return WORD_VALUE if feature.startswith(WORD_PREFIXES) else 1.0


# Facts of the setup a report states in words (model and GPU names): their names are the reporter's, not the
# mechanism's.
STATED_SETUP = (ModelNamed, DeviceNamed)


def features(ev: Evidence, sit: Situation, setup: EngineSetup) -> list[str]:
    """The features of one diagnosis: words of the facts' lines (each line once) and typed facts."""
    found: set[str] = set()
    seen_lines: set[str] = set()
    for fact in ev:
        if isinstance(fact, STATED_SETUP):
            continue  # the setup a report states enters as its quantities (_setup_features), not its words
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
        elif isinstance(fact, LeverTried):
            found.add(f"lever:{fact.lever.name.lower()}:{'helped' if fact.helped else 'no-help'}")
    for head in ev.heads.values():
        for line in head.splitlines():
            found.update(f"r:{w}" for w in words(line))
    crash = sit.kv_at_crash
    if crash is not None and crash.kv_usage is not None:
        found.add(f"kv-at-crash-band={_band(crash.kv_usage, (0.6, 0.9))}")
    for kind in (LoadSample, ScheduledStep, GpuProcess, Snapshot):
        if ev.count(kind):
            found.add(f"has:{kind.__name__}")
    found.add(f"phase:{sit.phase}")
    found.add(f"engine:{setup.engine}")
    found.add(f"gpu-failure:{sit.gpu_failure}")
    found.update(_setup_features(setup))
    return sorted(found)


@dataclass(frozen=True)
class Prior:
    """A trained prior: per class an intercept and per feature one weight for each class; the temperature its
    logits are divided by (fitted by cross-validation) and the weight `diagnosis.rank` blends it with."""

    classes: tuple[str, ...]
    intercepts: tuple[float, ...]
    weights: dict[str, tuple[float, ...]]
    meta: dict[str, Any]
    temperature: float
    blend_weight: float
    # Below this confidence of the rules' first cause the prior orders the causes (diagnosis.rank).
    prior_first_below: float

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Prior:
        classes = tuple(str(c) for c in payload["classes"])
        weights = {str(f): tuple(float(w) for w in ws) for f, ws in payload["weights"].items()}
        return cls(
            classes,
            tuple(float(b) for b in payload["intercepts"]),
            weights,
            dict(payload["meta"]),
            float(payload["temperature"]),
            float(payload["blend_weight"]),
            float(payload["prior_first_below"]),
        )

    def logits(self, feats: list[str]) -> list[float]:
        """Per class the intercept plus the weights of the present features times their values (the model's
        decision function; features it never saw add nothing)."""
        logits = list(self.intercepts)
        for f in feats:
            ws = self.weights.get(f)
            if ws is not None:
                v = value(f)
                logits = [a + v * w for a, w in zip(logits, ws, strict=True)]
        return logits

    def shares(self, feats: list[str]) -> dict[str, float]:
        """The probability of each class given the features (a softmax over the logits over the
        temperature)."""
        logits = [x / self.temperature for x in self.logits(feats)]
        top = max(logits)
        exps = [math.exp(x - top) for x in logits]
        total = sum(exps)
        return {c: e / total for c, e in zip(self.classes, exps, strict=True)}


@cache
def shipped() -> Prior:
    """The prior shipped with the package (`data/prior.json`)."""
    text = resources.files("oomguard.diagnosis").joinpath("data", PRIOR_FILE).read_text("utf-8")
    return Prior.from_payload(json.loads(text))
