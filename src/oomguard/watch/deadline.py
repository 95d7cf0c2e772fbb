"""Calls that must not freeze the watcher: run in a worker thread, abandoned when their deadline passes.

NVML calls block when a GPU or its driver is wedged (Xid errors, a GPU fallen off the bus), which is when
watch should be alerting, not waiting. A probe whose call is still stuck from an earlier tick is not called
again (threads would pile up); it is reported as not answering until the call returns.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class StuckCall(TimeoutError):
    """The call did not return within its deadline (or an earlier one is still running)."""


class BoundedCaller(Generic[T]):
    """Calls `fn(arg)` in a daemon thread and waits at most `timeout` seconds for the answer."""

    def __init__(self, name: str, timeout: float) -> None:
        self.name = name
        self.timeout = timeout
        self._running: concurrent.futures.Future[T] | None = None

    def call(self, fn: Callable[[float], T], arg: float) -> T:
        if self._running is not None and not self._running.done():
            raise StuckCall(f"{self.name}: an earlier call is still blocked")
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn(arg))
            except BaseException as err:  # noqa: BLE001 - handed to the waiting thread
                future.set_exception(err)

        threading.Thread(target=run, name=f"oomguard-{self.name}", daemon=True).start()
        self._running = future
        try:
            return future.result(timeout=self.timeout)
        except concurrent.futures.TimeoutError:
            raise StuckCall(f"{self.name}: no answer within {self.timeout:g} s") from None
