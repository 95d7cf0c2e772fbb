"""`ps` output (`ps aux`, `ps -o pid,rss,...`, `top`'s batch table): each process's resident memory.

The header names the columns ("USER PID %CPU %MEM VSZ RSS TTY STAT START TIME COMMAND", procps); RSS is in
KiB. The same pid's RSS across several pastes ("two hours later ...") is the host-memory trend that tells a
leak from a steady footprint, so every row is kept as a `rss` HostMemory fact scoped to its pid and command.
"""

from __future__ import annotations

import re

from oomguard.diagnosis.evidence import HostMemory
from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import Context, LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers

_KIB = 1 << 10
# A header names PID and RSS among upper-case column names (ps aux, ps -eo, top -b's "PID USER ... RES").
_HEADER = re.compile(r"^\s*(?:[%A-Z]+\s+)*PID\s+(?:[%A-Z]+\s+)*RSS\b")
# A process this small is a shell or a helper, not an engine worker.
MIN_RSS = 64 << 20


class Parser(LineParser):
    # Only the header is a trigger; the rows under it are read while the table lasts (busy()).
    TRIGGERS = Triggers(words=("RSS",))

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.columns: list[str] = []

    def busy(self) -> bool:
        return bool(self.columns)

    def feed(self, line: Line, msg: Message) -> None:
        text = line.text.strip()
        if _HEADER.match(text):
            self.columns = text.split()
            return
        if not self.columns:
            return
        cells = text.split(None, len(self.columns) - 1)
        if len(cells) < len(self.columns) or not cells[self.columns.index("PID")].isdigit():
            self.columns = []  # the table ended
            return
        row = dict(zip(self.columns, cells))
        rss = row["RSS"]
        if not rss.isdigit() or int(rss) * _KIB < MIN_RSS:
            return
        self.ctx.emit(
            HostMemory(
                where=self.ctx.where(line),
                text=self.ctx.clip(text),
                quantity="rss",
                value=int(rss) * _KIB,
                scope=f"pid {row['PID']}",  # ps shows a Ray worker's command as its current task
            )
        )
