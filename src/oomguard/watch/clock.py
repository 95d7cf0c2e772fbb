"""The watch loop's clock: wall-clock timestamps that advance with the monotonic clock.

Scheduling by `time.time()` breaks when the wall clock steps (an NTP correction, a VM resumed): a step
back makes `sleep(interval - elapsed)` sleep for the step, and samples stored with the stepped timestamps
make counters look as if they went down, a false restart. Here the wall clock is read once, at start, and
every later timestamp is that plus monotonic time elapsed, so time never runs backwards within a run.
"""

from __future__ import annotations

import time


class TickClock:
    def __init__(self) -> None:
        self._wall0 = time.time()
        self._mono0 = time.monotonic()

    def now(self) -> float:
        """Seconds since the epoch, as of the start of the run plus monotonic time since."""
        return self._wall0 + (time.monotonic() - self._mono0)

    def monotonic(self) -> float:
        return time.monotonic()
