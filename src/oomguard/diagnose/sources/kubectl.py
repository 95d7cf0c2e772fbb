"""`kubectl describe pod` (Last State, Reason, Exit Code, Restart Count, Limits) and `kubectl get events`
(OOMKilling, Evicted, BackOff), plus the exit-status lines of docker and systemd."""

from __future__ import annotations

import re

from oomguard.diagnose.evidence import HostMemory
from oomguard.diagnose.scan import Line
from oomguard.diagnose.sources.base import Context, LineParser, Message
from oomguard.diagnose.sources.triggers import Triggers

# Kubernetes quantities (binary and decimal suffixes).
_QUANTITY = {
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "K": 10**3,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "": 1,
}
_MEM_LIMIT = re.compile(r"^\s*memory:\s*(?P<v>\d+(?:\.\d+)?)(?P<u>Ki|Mi|Gi|Ti|K|k|M|G|T)?\s*$")
_EXIT = re.compile(
    r"(?:Exit Code:\s*|exit code[: ]\s*|exited with code\s*|ExitCode[\":\s]*)(?P<c>\d+)", re.IGNORECASE
)
_RESTARTS = re.compile(r"Restart Count:\s*(?P<n>\d+)")


# Lines without one of these are not kubectl's or docker's (the section headers are among them).
_WORDS = ("xit", "OOMKill", "Restart", "Limits", "Requests", "memory", "Evicted", "KILL")


class Parser(LineParser):
    TRIGGERS = Triggers(words=_WORDS)

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.section = ""  # 'limits' | 'requests' while inside those blocks of kubectl describe

    def feed(self, line: Line, msg: Message) -> None:
        body = line.text.strip()
        if not any(k in body for k in _WORDS):
            return
        if body.startswith("Limits:"):
            self.section = "limits"
            return
        if body.startswith("Requests:"):
            self.section = "requests"
            return
        if "OOMKill" in body:
            self.ctx.signal(line, body, "oom-killed")
        m = _EXIT.search(body)
        if m and int(m.group("c")) == 137:
            self.ctx.signal(line, body, "exit-137")
        if "status=9/KILL" in body:
            self.ctx.signal(line, body, "exit-137")
        if "Evicted" in body and "memory" in body.lower():
            self.ctx.signal(line, body, "oom-killed")
        r = _RESTARTS.search(body)
        if r:
            self.ctx.emit(
                HostMemory(
                    where=self.ctx.where(line),
                    text=self.ctx.clip(body),
                    quantity="restarts",
                    value=int(r.group("n")),
                )
            )
        lim = _MEM_LIMIT.match(line.text)
        if lim and self.section == "limits":
            value = float(lim.group("v")) * _QUANTITY[lim.group("u") or ""]
            self.ctx.emit(
                HostMemory(
                    where=self.ctx.where(line),
                    text=self.ctx.clip(body),
                    quantity="limit",
                    value=value,
                    scope="pod",
                )
            )
