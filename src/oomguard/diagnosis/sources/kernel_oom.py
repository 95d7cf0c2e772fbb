"""Kernel OOM-killer reports (dmesg, journalctl, /var/log/kern.log), a shell's bare "Killed", NVIDIA driver
memory errors on unified-memory parts (GB10/GH200: "NVRM ... NV_ERR_NO_MEMORY"), systemd's verdict on a
service the OOM killer hit ("ollama.service: Failed with result 'oom-kill'", "A process of this unit has
been killed by the OOM killer", "Consumed ..., 123.9G memory peak"), the memory cgroup's usage line of the
kernel's report ("memory: usage 131072kB, limit 131072kB, failcnt 15691", mm/memcontrol.c) and an engine's
worker dying of SIGKILL ("died, exit code: -9")."""

from __future__ import annotations

import re

from oomguard.diagnosis.evidence import HostMemory
from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers

_KILLED = re.compile(
    r"(?:Out of memory|Memory cgroup out of memory): Killed process (?P<pid>\d+) \((?P<name>[^)]*)\)"
    r"(?:.*?anon-rss:(?P<rss>\d+)kB)?"
)
_OOM_KILL = re.compile(r"oom-kill:.*?(?:oom_memcg=(?P<memcg>[^,]+))?.*?task=(?P<task>[^,]+),pid=(?P<pid>\d+)")
_KIB = 1 << 10
_MEMCG = re.compile(r"\bmemory: usage (?P<usage>\d+)kB, limit (?P<limit>\d+)kB, failcnt (?P<failcnt>\d+)")
# systemd's unit messages (src/core/unit.c, service.c); its sizes are binary (format_bytes: K, M, G, T).
_SYSTEMD_OOM = ("killed by the OOM killer", "Failed with result 'oom-kill'")
_SYSTEMD_PEAK = re.compile(
    r"(?P<unit>[\w@.-]+\.service): Consumed .*?(?P<v>[\d.]+)(?P<u>[KMGT])B? memory peak"
)
_BINARY = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# A worker process an engine saw die of SIGKILL (Python's exit code -9), what the OOM killer sends: vLLM V0's
# worker monitor "Worker VllmWorkerProcess pid 1786 died, exit code: -9" (executor/multiproc_worker_utils.py),
# V1's "Worker proc VllmWorker-0 died unexpectedly (exit code: -9)", SGLang's "Rank 0 scheduler died during
# initialization (exit code: -9)", torch elastic's "failed (exitcode: -9)".
_DIED_SIGKILL = re.compile(r"\bdied\b[^\n]{0,60}?\bexit code:? \(?-9\b|\bexitcode[:=] ?-9\b")


class Parser(LineParser):
    TRIGGERS = Triggers(
        words=(
            "Killed",
            "SIGKILL",
            "oom-kill:",
            "invoked oom-killer",
            "oom_reaper: reaped",
            "NV_ERR_NO_MEMORY",
            *_SYSTEMD_OOM,
            "memory peak",
            "failcnt",
            "exit code",
            "exitcode",
        )
    )

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        if "Killed process" in body:
            m = _KILLED.search(body)
            self.ctx.signal(line, body, "kernel-oom-kill")
            if m and m.group("rss"):
                self.ctx.emit(
                    HostMemory(
                        where=self.ctx.where(line),
                        text=self.ctx.clip(body),
                        quantity="killed_rss",
                        value=int(m.group("rss")) * _KIB,
                        scope=m.group("name"),
                    )
                )
        elif "oom-kill:" in body or "invoked oom-killer" in body or "oom_reaper: reaped" in body:
            self.ctx.signal(line, body, "kernel-oom-kill")
        elif (
            body.strip() in ("Killed", "Killed.")
            # each pattern only where its word is: a search tries every position of every line (H6)
            or ("Killed" in body and re.search(r"\bline \d+:\s*\d+ Killed\b", body))
            or re.match(r"^Killed\b(?! process)", body.strip())  # "Killed while loading weight"
            or (
                "SIGKILL" in body
                and re.search(r"\bkilled (?:with|by) SIGKILL\b|\bSIGKILL\b.{0,40}\b137\b", body)
            )
        ):
            self.ctx.signal(line, body, "host-killed")
        if "-9" in body and _DIED_SIGKILL.search(body):
            self.ctx.signal(line, body, "host-killed")
        if "NV_ERR_NO_MEMORY" in body:
            self.ctx.signal(line, body, "unified-memory-exhausted")
        if any(w in body for w in _SYSTEMD_OOM):
            self.ctx.signal(line, body, "kernel-oom-kill")
        if "memory peak" in body:
            self._systemd_peak(line, body)
        if "failcnt" in body:
            self._memcg_usage(line, body)

    def _systemd_peak(self, line: Line, body: str) -> None:
        m = _SYSTEMD_PEAK.search(body)
        if m:
            value = float(m.group("v")) * _BINARY[m.group("u")]
            self.ctx.emit(
                HostMemory(
                    where=self.ctx.where(line),
                    text=self.ctx.clip(body),
                    quantity="peak",
                    value=value,
                    scope=m.group("unit"),
                )
            )

    def _memcg_usage(self, line: Line, body: str) -> None:
        """The cgroup's usage and limit as the kernel printed them when its OOM killer ran (the memory line,
        not memory+swap or kmem, whose limits are usually unset)."""
        m = _MEMCG.search(body)
        if not m or "memory+swap" in body or "kmem" in body:
            return
        for quantity, group in (("current", "usage"), ("limit", "limit")):
            self.ctx.emit(
                HostMemory(
                    where=self.ctx.where(line),
                    text=self.ctx.clip(body),
                    quantity=quantity,
                    value=int(m.group(group)) * _KIB,
                    scope="memory cgroup",
                )
            )
