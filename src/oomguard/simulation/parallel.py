"""Run independent simulations in parallel processes (a sweep's values, a fix search's flags).

A simulation is pure Python and CPU-bound, so threads would share one interpreter lock; processes do not.
Workers are forked, so they inherit the workload and the setup already in memory: nothing big is pickled
on the way in, only each job's small result on the way back. Where fork is unavailable (or one CPU, or one
job) the jobs run one after the other in this process, with the same results.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

# The job of the current `parallel_map` call, set before the fork so that workers inherit it.
_JOB: tuple[Callable[[Any], Any], Sequence[Any]] | None = None


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _call(index: int) -> Any:
    assert _JOB is not None, "a worker forked without a job"
    fn, items = _JOB
    return fn(items[index])


def parallel_map(fn: Callable[[T], R], items: Sequence[T], workers: int | None = None) -> list[R]:
    """[fn(x) for x in items], in order, over up to `workers` forked processes (default: the CPUs)."""
    global _JOB
    n = min(len(items), workers or available_cpus())
    if n <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [fn(x) for x in items]
    _JOB = (fn, items)
    try:
        with multiprocessing.get_context("fork").Pool(n) as pool:
            return pool.map(_call, range(len(items)), chunksize=1)
    finally:
        _JOB = None
