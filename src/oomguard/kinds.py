"""The closed sets every package shares: how a number is known, why a plan fails, what a plan is for.

Each is a `str` enum, so a member compares equal to its wire name ("no-kv-memory") and prints as it,
which keeps the JSON keys and the text output as they were while code names the members.
"""

from __future__ import annotations

from enum import Enum


class _Named(str, Enum):
    """A str enum that prints as its value (f"{Failure.NO_KV_MEMORY}" == "no-kv-memory")."""

    # Hash and compare as the plain string, so a member finds a dict entry keyed by its wire name.
    __hash__ = str.__hash__

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Provenance(_Named):
    """How a ledger number is known."""

    EXACT = "exact"  # from the config and the engine's code
    DERIVED = "derived"  # exact given an estimate (the KV pool sized from an estimated rest)
    ESTIMATED = "estimated"  # a fitted mechanism, with a band
    MEASURED = "measured"  # read from an earlier run's log (--calibrate)
    GIVEN = "given"  # a number the user gave (a what-if ledger)


class Failure(_Named):
    """The startup check that ends a planned start (the first one the engine meets)."""

    STARTUP_FREE_MEMORY = "startup-free-memory"  # free memory at start < the budget
    WEIGHTS_DONT_FIT = "weights-dont-fit"  # the weights alone do not fit
    NO_KV_MEMORY = "no-kv-memory"  # nothing left for KV blocks
    MAX_MODEL_LEN = "max-model-len"  # the pool cannot hold one max-length request
    KV_CACHE_ALLOCATION = "kv-cache-allocation"  # a forced pool does not fit the device
    SAMPLER_WARMUP = "sampler-warmup"  # the sampler warm-up after capture runs out
    CUDA_GRAPH_CAPTURE = "cuda-graph-capture"  # the graph pool does not fit outside the budget
    REPLICAS_EXCEED_GPU = "replicas-exceed-gpu"  # co-located replicas at their peaks exceed the device


# The failures that a larger KV budget (or fewer bytes per token) can cure.
KV_SHORTFALLS = (Failure.MAX_MODEL_LEN, Failure.NO_KV_MEMORY)
# The failures of memory outside the budget (cured by a smaller budget or a smaller warm-up).
OUTSIDE_BUDGET = (Failure.SAMPLER_WARMUP, Failure.CUDA_GRAPH_CAPTURE)


class Verdict(_Named):
    """What a plan says about a start. MARGINAL is for fits whose margin is inside the estimate bands."""

    FITS = "fits"
    MARGINAL = "marginal"
    WILL_NOT_START = "will-not-start"


class Usage(_Named):
    """vLLM's UsageContext: the OpenAI server or the offline `LLM()` class (their batch defaults differ)."""

    SERVE = "serve"
    LLM = "llm"
