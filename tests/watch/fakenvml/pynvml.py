"""A fake `pynvml` that injects NVML faults (set FAKE_NVML to ok, hang, flaky, initfail or weird)."""

import os
import time

MODE = os.environ.get("FAKE_NVML", "ok")


class NVMLError(Exception):
    pass


class _Mem:
    def __init__(self, used: int, total: int) -> None:
        self.used, self.total, self.free = used, total, total - used


_n = [0]


def nvmlInit() -> None:
    if MODE == "initfail":
        raise NVMLError("Driver Not Loaded")


def nvmlShutdown() -> None:
    pass


def nvmlDeviceGetCount() -> int:
    return 2


def nvmlDeviceGetHandleByIndex(i: int) -> int:
    return i


def nvmlDeviceGetMemoryInfo(h: int) -> _Mem:
    _n[0] += 1
    if MODE == "hang" and _n[0] > 4:
        time.sleep(3600)
    if MODE == "flaky" and _n[0] % 3 == 0:
        raise NVMLError("GPU is lost")
    if MODE == "weird":
        return _Mem(2**64 - 1, 0) if h == 0 else _Mem(0, 2**64 - 1)
    return _Mem(40 * 2**30, 80 * 2**30)
