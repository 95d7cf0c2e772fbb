"""cgroup memory controller files, v2 (memory.events, memory.max, memory.current, memory.peak) and v1
(memory.limit_in_bytes, memory.usage_in_bytes, memory.max_usage_in_bytes, memory.oom_control), read as files
(detected by name) or quoted in a text log after the `cat` that printed them."""

from __future__ import annotations

import re

from oomguard.diagnosis.evidence import Evidence, HostMemory, Signal, Where
from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers

# memory.current within this fraction of memory.max counts as "at the limit" (the kernel reclaims, then
# kills).
AT_LIMIT_FRACTION = 0.97
_KEYVAL = re.compile(r"^\s*(?P<k>oom_kill|oom|max|high|oom_group_kill|under_oom)\s+(?P<v>\d+)\s*$")
_NUMBER = re.compile(r"^\s*(?P<v>\d+|max)\s*$")
# The file a bare number belongs to, by its name.
VALUE_FILES = {
    "memory.max": "limit",
    "memory.limit_in_bytes": "limit",
    "memory.memsw.limit_in_bytes": "limit",
    "memory.high": "high",
    "memory.current": "current",
    "memory.usage_in_bytes": "current",
    "memory.peak": "peak",
    "memory.max_usage_in_bytes": "peak",
}
# cgroup v1 reports "no limit" as a huge page-aligned number.
V1_UNLIMITED = 1 << 62


def _value_fact(where: Where, text: str, quantity: str, raw: str, scope: str) -> HostMemory | None:
    if raw == "max":
        return None
    value = int(raw)
    if quantity == "limit" and value >= V1_UNLIMITED:
        return None
    return HostMemory(where=where, text=text, quantity=quantity, value=value, scope=scope)


def read_document(name: str, base: str, data: bytes, evidence: Evidence) -> int:
    """One cgroup file: returns how many facts it gave."""
    facts = 0
    text = data.decode("utf-8", "replace")
    for no, raw in enumerate(text.splitlines(), 1):
        where = Where(name, no)
        if base in VALUE_FILES:
            m = _NUMBER.match(raw)
            if m:
                fact = _value_fact(where, raw.strip(), VALUE_FILES[base], m.group("v"), name)
                if fact:
                    evidence.add(fact)
                    facts += 1
            continue
        kv = _KEYVAL.match(raw)
        if kv and kv.group("k") == "oom_kill":
            evidence.add(
                HostMemory(
                    where=where,
                    text=raw.strip(),
                    quantity="oom_kill_count",
                    value=int(kv.group("v")),
                    scope=name,
                )
            )
            facts += 1
            if int(kv.group("v")) > 0:
                evidence.add(
                    Signal(
                        where=where,
                        text=raw.strip(),
                        name="cgroup-oom-kill",
                        numbers=(("count", float(kv.group("v"))),),
                    )
                )
                facts += 1
    return facts


class Parser(LineParser):
    """The same facts from a text log: `oom_kill N` lines and `cat .../memory.max` followed by its value."""

    TRIGGERS = Triggers(words=("oom_kill", *VALUE_FILES))

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        kv = _KEYVAL.match(body)
        if kv and kv.group("k") == "oom_kill":
            count = int(kv.group("v"))
            self.ctx.emit(
                HostMemory(
                    where=self.ctx.where(line),
                    text=self.ctx.clip(body),
                    quantity="oom_kill_count",
                    value=count,
                )
            )
            if count > 0:
                self.ctx.emit(
                    Signal(
                        where=self.ctx.where(line),
                        text=self.ctx.clip(body),
                        name="cgroup-oom-kill",
                        numbers=(("count", float(count)),),
                    )
                )
            return
        for file, quantity in VALUE_FILES.items():
            if file in body:
                after = line.following()
                m = _NUMBER.match(after[0]) if after else None
                if m:
                    fact = _value_fact(
                        self.ctx.where(line),
                        self.ctx.clip(body + " -> " + after[0].strip()),
                        quantity,
                        m.group("v"),
                        file,
                    )
                    if fact:
                        self.ctx.emit(fact)
                return
