"""GPU memory through NVML (nvidia-ml-py, `pip install 'oomguard[nvml]'`), skipped cleanly without it.

`nvmlDeviceGetMemoryInfo` gives used/total in bytes for the whole device (every process on it), which is
what runs out: vLLM's own share is fixed after startup (the KV cache is preallocated), so a rise here at
steady load is a leak, fragmentation, or another process moving in.
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType
from typing import Any

from oomguard.watch.samples import Sample

log = logging.getLogger(__name__)
TARGET = "nvml"


class NvmlProbe:
    """Used and total memory of every visible GPU; `available` is False (with `reason`) when NVML is not."""

    def __init__(self) -> None:
        self.target = TARGET
        self.available = False
        self.reason = ""
        self._nvml: ModuleType | None = None
        self._handles: list[tuple[str, Any]] = []
        try:
            nvml = importlib.import_module("pynvml")  # the module nvidia-ml-py installs
        except ImportError:
            self.reason = (
                "nvidia-ml-py is not installed (pip install 'oomguard[nvml]'): GPU memory not watched"
            )
            return
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
            self._handles = [(f"gpu{i}", nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
        except Exception as err:  # noqa: BLE001 - NVMLError_* subclasses, or a missing libnvidia-ml.so
            self.reason = f"NVML unavailable ({type(err).__name__}: {err}): GPU memory not watched"
            return
        self._nvml = nvml
        self.available = bool(self._handles)
        if not self._handles:
            self.reason = "NVML sees no GPU: GPU memory not watched"

    def sample(self, now: float) -> list[Sample]:
        if not self.available or self._nvml is None:
            return []
        out: list[Sample] = []
        for name, handle in self._handles:
            try:
                info = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            except Exception as err:  # noqa: BLE001 - a GPU that fell off the bus must not stop the watcher
                log.warning("NVML: cannot read %s memory: %s", name, err)
                continue
            out.append(Sample(TARGET, name, "gpu_memory_used_bytes", now, float(info.used)))
            out.append(Sample(TARGET, name, "gpu_memory_total_bytes", now, float(info.total)))
        return out

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception as err:  # noqa: BLE001 - shutting down: nothing left to protect
                log.debug("NVML shutdown: %s", err)
            self._nvml = None
