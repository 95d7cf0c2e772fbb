"""`free` output (-b/-k/-m/-g/-h): the Mem: row under its header, total / used / available; and the same
figures as /proc/meminfo prints them ("MemTotal:       263855252 kB", "MemAvailable:     1048576 kB", always
KiB, fs/proc/meminfo.c)."""

from __future__ import annotations

import re

from oomguard.diagnosis.evidence import HostMemory
from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import Context, LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers

_HUMAN = {
    "B": 1,
    "K": 1 << 10,
    "Ki": 1 << 10,
    "M": 1 << 20,
    "Mi": 1 << 20,
    "G": 1 << 30,
    "Gi": 1 << 30,
    "T": 1 << 40,
    "Ti": 1 << 40,
}
_CELL = re.compile(r"^(?P<v>[\d.]+)(?P<u>[KMGT]i?|B)?$")
_MEMINFO = re.compile(r"^(?P<k>MemTotal|MemAvailable):\s+(?P<v>\d+) kB$")
_MEMINFO_QUANTITY = {"MemTotal": "total", "MemAvailable": "available"}
# Plain `free` prints KiB, `free -m` MiB. A host with >= 10 GiB shows >= 10M in KiB and < 10M in MiB unless it
# has more than 10 TiB, so a bare total above this is KiB.
KIB_THRESHOLD = 10_000_000


class Parser(LineParser):
    # The header ("total used free ..."), the unit ("free -m"), the rows ("Mem:", "-/+ buffers/cache:").
    TRIGGERS = Triggers(words=("free", "Mem:", "-/+ buffers/cache:", "MemTotal:", "MemAvailable:"))

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.header: list[str] = []
        self.unit: int | None = None
        self.bare_unit = 1 << 20  # the unit of the last bare-number Mem: row (the old cache row follows it)

    def feed(self, line: Line, msg: Message) -> None:
        text = line.text.strip()
        if text.startswith("total") and "used" in text and "free" in text:
            self.header = text.split()
            return
        if "free -" in text:
            flag = text.split("free -", 1)[1][:1]
            self.unit = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(flag)
            return
        if text.startswith("-/+ buffers/cache:"):
            self._old_available(line, text)
            return
        if text.startswith(("MemTotal:", "MemAvailable:")):
            info = _MEMINFO.match(text)
            if info:
                self.ctx.emit(
                    HostMemory(
                        where=self.ctx.where(line),
                        text=self.ctx.clip(text),
                        quantity=_MEMINFO_QUANTITY[info.group("k")],
                        value=int(info.group("v")) << 10,
                        scope="host",
                    )
                )
            return
        if not text.startswith("Mem:"):
            return
        cells = text.split()[1:]
        header = self.header or ["total", "used", "free", "shared", "buff/cache", "available"]
        values: dict[str, float] = {}
        for name, cell in zip(header, cells):
            m = _CELL.match(cell)
            if not m:
                return
            values[name] = float(m.group("v")) * (_HUMAN[m.group("u")] if m.group("u") else 1)
        if not any(c[-1:].isalpha() for c in cells):
            self.bare_unit = self.unit or ((1 << 10) if values.get("total", 0) > KIB_THRESHOLD else (1 << 20))
            values = {k: v * self.bare_unit for k, v in values.items()}
        for name in ("total", "used", "available"):
            if name in values:
                self.ctx.emit(
                    HostMemory(
                        where=self.ctx.where(line),
                        text=self.ctx.clip(text),
                        quantity=name,
                        value=values[name],
                        scope="host",
                    )
                )

    def _old_available(self, line: Line, text: str) -> None:
        """procps before 3.3.10 has no 'available' column; its '-/+ buffers/cache:' row's free is the same
        idea
        (free plus reclaimable cache)."""
        cells = text.split(":", 1)[1].split()
        m = _CELL.match(cells[1]) if len(cells) == 2 else None
        if not m:
            return
        scale = _HUMAN[m.group("u")] if m.group("u") else self.bare_unit
        self.ctx.emit(
            HostMemory(
                where=self.ctx.where(line),
                text=self.ctx.clip(text),
                quantity="available",
                value=float(m.group("v")) * scale,
                scope="host",
            )
        )
