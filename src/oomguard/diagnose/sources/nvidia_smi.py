"""nvidia-smi output: the default table (per-GPU memory row, process table) and the CSV of
`--query-gpu=index,name,memory.total,memory.used,memory.free` and `--query-compute-apps=pid,process_name,
used_memory` (with or without header and units). MiB in nvidia-smi is 2**20 bytes."""

from __future__ import annotations

import re

from oomguard.diagnose.evidence import GpuMemory, GpuProcess
from oomguard.diagnose.scan import Line
from oomguard.diagnose.sources.base import Context, Message

ANCHORS = (b"MiB", b"memory.total", b"used_memory", b"used_gpu_memory", b"process_name")

_MIB = 1 << 20
_GPU_ROW = re.compile(r"^\|\s*(?P<idx>\d+)\s+(?P<name>.+?)\s+(?:On|Off)\s*\|")
_MEM_ROW = re.compile(r"\|\s*(?P<used>\d+)\s*MiB\s*/\s*(?P<total>\d+)\s*MiB\s*\|")
_PROC_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?:\S+\s+\S+\s+)?(?P<pid>\d+)\s+(?P<type>C\+G|C|G|M|M\+C)\s+(?P<name>.+?)\s+"
    r"(?P<used>\d+)\s*MiB\s*\|$")
_CSV_VALUE = re.compile(r"^\s*(?P<v>[\d.]+)\s*(?P<u>MiB|GiB)?\s*$")


def _mib(text: str) -> int | None:
    m = _CSV_VALUE.match(text)
    if not m:
        return None
    scale = (1 << 30) if m.group("u") == "GiB" else _MIB
    return int(float(m.group("v")) * scale)


class Parser:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.gpu: tuple[int, str] | None = None
        self.columns: list[str] = []

    def finish(self) -> None:
        pass

    def feed(self, line: Line, msg: Message) -> None:
        text = line.text.rstrip()
        g = _GPU_ROW.match(text)
        if g and "MiB" not in text:
            self.gpu = (int(g.group("idx")), g.group("name").strip())
            return
        if "MiB" in text and text.startswith("|"):
            p = _PROC_ROW.match(text)
            if p:
                self.ctx.emit(GpuProcess(where=self.ctx.where(line), text=self.ctx.clip(text), gpu=int(p.group("gpu")),
                                         pid=int(p.group("pid")), name=p.group("name").strip(),
                                         used=int(p.group("used")) * _MIB))
                return
            m = _MEM_ROW.search(text)
            if m and self.gpu is not None:
                self.ctx.emit(GpuMemory(where=self.ctx.where(line), text=self.ctx.clip(text), gpu=self.gpu[0],
                                        name=self.gpu[1], total=int(m.group("total")) * _MIB,
                                        used=int(m.group("used")) * _MIB))
                self.gpu = None
            return
        if "," in text and ("memory.total" in text or "used_memory" in text or "used_gpu_memory" in text
                            or "process_name" in text):
            self.columns = [c.strip().split(" ")[0] for c in text.split(",")]
            return
        if self.columns and "," in text:
            self._csv_row(line, [c.strip() for c in text.split(",")])

    def _csv_row(self, line: Line, cells: list[str]) -> None:
        if len(cells) != len(self.columns):
            self.columns = []
            return
        row = dict(zip(self.columns, cells))
        where, text = self.ctx.where(line), self.ctx.clip(line.text)
        if "pid" in row:
            used = _mib(row.get("used_memory", row.get("used_gpu_memory", "")))
            if used is not None:
                pid = row["pid"]
                self.ctx.emit(GpuProcess(where=where, text=text, gpu=None, pid=int(pid) if pid.isdigit() else None,
                                         name=row.get("process_name", row.get("name", "")), used=used))
        elif "memory.total" in row:
            total, used = _mib(row["memory.total"]), _mib(row.get("memory.used", ""))
            free = _mib(row.get("memory.free", ""))
            if used is None and total is not None and free is not None:
                used = total - free
            if total is not None and used is not None:
                idx = row.get("index", "")
                self.ctx.emit(GpuMemory(where=where, text=text, gpu=int(idx) if idx.isdigit() else None,
                                        name=row.get("name", ""), total=total, used=used))
