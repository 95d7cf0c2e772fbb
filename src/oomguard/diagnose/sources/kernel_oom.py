"""Kernel OOM-killer reports (dmesg, journalctl, /var/log/kern.log), the memory cgroup's own lines in that
report ("memory: usage 131072kB, limit 131072kB, failcnt 15691"), systemd's verdict on a unit the killer hit
("Failed with result 'oom-kill'"), a shell's bare "Killed", NVIDIA driver memory errors on unified-memory
parts (GB10/GH200: "NVRM ... NV_ERR_NO_MEMORY")."""

from __future__ import annotations

import re

from oomguard.diagnose.evidence import HostMemory
from oomguard.diagnose.scan import Line
from oomguard.diagnose.sources.base import LineParser, Message
from oomguard.diagnose.sources.triggers import Triggers

_KILLED = re.compile(
    r"(?:Out of memory|Memory cgroup out of memory): Killed process (?P<pid>\d+) \((?P<name>[^)]*)\)"
    r"(?:.*?anon-rss:(?P<rss>\d+)kB)?"
)
_OOM_KILL = re.compile(r"oom-kill:.*?(?:oom_memcg=(?P<memcg>[^,]+))?.*?task=(?P<task>[^,]+),pid=(?P<pid>\d+)")
_KIB = 1 << 10
# The kernel's memory-cgroup summary printed with an OOM kill (cgroup v1 names; v2 prints the same line).
_MEMCG = re.compile(r"\bmemory: usage (?P<usage>\d+)kB, limit (?P<limit>\d+)kB, failcnt (?P<fail>\d+)")
# systemd on a unit whose process the OOM killer took.
_SYSTEMD = ("Failed with result 'oom-kill'", "killed by the OOM killer")


class Parser(LineParser):
    TRIGGERS = Triggers(
        words=(
            "Killed",
            "SIGKILL",
            "oom-kill:",
            "invoked oom-killer",
            "oom_reaper: reaped",
            "NV_ERR_NO_MEMORY",
            "memory: usage",
            *_SYSTEMD,
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
            or re.search(r"\bline \d+:\s*\d+ Killed\b", body)
            or re.match(r"^Killed\b(?! process)", body.strip())  # "Killed while loading weight"
            or re.search(r"\bkilled (?:with|by) SIGKILL\b|\bSIGKILL\b.{0,40}\b137\b", body)
        ):
            self.ctx.signal(line, body, "host-killed")
        if any(k in body for k in _SYSTEMD):
            self.ctx.signal(line, body, "kernel-oom-kill")
        m = _MEMCG.search(body)
        if m:
            for quantity in ("usage", "limit"):
                self.ctx.emit(
                    HostMemory(
                        where=self.ctx.where(line),
                        text=self.ctx.clip(body),
                        quantity="current" if quantity == "usage" else "limit",
                        value=int(m.group(quantity)) * _KIB,
                        scope="memory cgroup",
                    )
                )
        if "NV_ERR_NO_MEMORY" in body:
            self.ctx.signal(line, body, "unified-memory-exhausted")
