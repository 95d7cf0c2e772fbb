"""nvidia-smi output found in any text (a saved file, a paste in an issue, a log that ran it): the default
table (GPU rows with their memory, the process section) and the CSV of `--query-gpu=...` and
`--query-compute-apps=...`; nvtop's process rows ("PID USER DEV TYPE GPU GPU MEM CPU HOST MEM Command").

The formats themselves are read by `oomguard.hardware` (parse_nvidia_smi, parse_nvidia_smi_processes);
this module only finds the nvidia-smi blocks among other lines, hands each block to those parsers and maps
their line numbers back to the document's. A GPU's CUDA total comes from the catalog when its name is
known (nvidia-smi's memory.total is larger than what CUDA, and so vLLM, sees).
"""

from __future__ import annotations

import re

from oomguard.diagnosis.evidence import GpuMemory, GpuProcess
from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import Context, LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers
from oomguard.errors import InputFormatError
from oomguard.hardware import parse_nvidia_smi, parse_nvidia_smi_processes

# A block longer than this is handed over in parts (memory stays bounded on a hostile input).
MAX_BLOCK_LINES = 512
# Headers of the two CSV queries (`memory.total [MiB]`, `used_gpu_memory [MiB]`).
_CSV_HEADER_KEYS = ("memory.total", "used_gpu_memory", "used_memory")
# A headerless `--query-gpu` row names its GPU ("0, NVIDIA H100 80GB HBM3, 81559 MiB, ...").
_GPU_ROW_HINT = re.compile(r"(?i)\b(nvidia|tesla|quadro|geforce|rtx|a100|h100|h200|l40)\b")
# An nvtop process row: "1880122 root   0  Compute   0%   5102MiB  33%     1%   5959MiB /opt/.../stub ...".
_NVTOP_ROW = re.compile(
    r"^\s*(?P<pid>\d+)\s+(?P<user>\S+)\s+(?P<dev>\d+)\s+(?P<type>Compute|Graphic|Graphics|C\+G)\s+"
    r"(?:\d+%|N/A)\s+(?P<mem>\d+(?:\.\d+)?)(?P<unit>[KMG]iB)\b(?:.*?\s(?P<cmd>/\S+|[\w.-]+)(?:\s|$))?"
)
_UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


class Parser(LineParser):
    # Table lines: borders start with "+-" or "+=", rows start and end with "|" (after any log prefix; a
    # docker compose prefix puts a "|" in every line, so a row is known by its end). The CSV by its header or
    # a GPU row.
    TRIGGERS = Triggers(words=("+-", "+=", *_CSV_HEADER_KEYS, "MiB"), line_ends=("|",))

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.kind = ""  # '' (outside a block) | 'table' | 'csv'
        self.block: list[tuple[int, str]] = []
        self.blanks = 0

    def feed(self, line: Line, msg: Message) -> None:
        text = line.text.rstrip()
        body = msg.body.lstrip()
        if body.startswith(("+-", "+=")) or (body.startswith("|") and body.rstrip(" \t\r").endswith("|")):
            if self.kind != "table":
                self._flush()
                self.kind = "table"
            self._add(line.no, body)
            return
        if self.kind == "table" and not text.strip() and self.blanks < 1:
            self.blanks += 1  # the blank line between the GPU table and the process table
            self._add(line.no, "")
            return
        if "," in body and any(k in body for k in _CSV_HEADER_KEYS):
            self._flush()
            self.kind = "csv"
            self._add(line.no, body)
            return
        if self.kind == "csv" and "," in body:
            self._add(line.no, body)
            return
        self._flush()
        nvtop = _NVTOP_ROW.match(text)
        if nvtop:
            self.ctx.emit(
                GpuProcess(
                    where=self.ctx.where(line),
                    text=self.ctx.clip(text),
                    gpu=int(nvtop.group("dev")),
                    pid=int(nvtop.group("pid")),
                    name=nvtop.group("cmd") or "",
                    used=round(float(nvtop.group("mem")) * _UNITS[nvtop.group("unit")]),
                )
            )
            return
        if "," in body and "MiB" in body and _GPU_ROW_HINT.search(body):
            self.kind = "csv"
            self._add(line.no, body)
            self._flush()

    def busy(self) -> bool:
        return self.kind != ""

    def _add(self, no: int, text: str) -> None:
        if text:
            self.blanks = 0
        self.block.append((no, text))
        if len(self.block) >= MAX_BLOCK_LINES:
            kind = self.kind
            self._flush()
            self.kind = kind

    def finish(self) -> None:
        self._flush()

    def _flush(self) -> None:
        block, self.block, self.kind, self.blanks = self.block, [], "", 0
        if not block:
            return
        text = "\n".join(t for _, t in block) + "\n"
        numbers = [no for no, _ in block]
        try:
            readings = parse_nvidia_smi(text)
        except InputFormatError as err:
            readings = []
            if "," in text and not any(k in text for k in ("pid", "process_name")):
                self.ctx.skipped.append(f"line {numbers[0]}: nvidia-smi CSV not read ({err})")
        for r in readings:
            if r.memory_total_bytes is None:
                continue
            used = r.memory_used_bytes
            if used is None and r.memory_free_bytes is not None:
                used = r.memory_total_bytes - r.memory_free_bytes
            if used is None:
                continue
            gpu = r.gpu
            cuda_total = gpu.total_bytes if gpu is not None and gpu.key != "custom" else None
            no = numbers[r.lineno - 1]
            self.ctx.emit(
                GpuMemory(
                    where=self.ctx.where_no(no),
                    text=self.ctx.clip(block[r.lineno - 1][1]),
                    gpu=r.index,
                    name=r.name,
                    total=r.memory_total_bytes,
                    used=used,
                    cuda_total=cuda_total,
                )
            )
        for p in parse_nvidia_smi_processes(text):
            no = numbers[p.lineno - 1]
            self.ctx.emit(
                GpuProcess(
                    where=self.ctx.where_no(no),
                    text=self.ctx.clip(block[p.lineno - 1][1]),
                    gpu=p.gpu_index,
                    pid=p.pid,
                    name=p.name,
                    used=p.used_bytes,
                )
            )
