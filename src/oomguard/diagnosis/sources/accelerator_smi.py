"""The device tables of accelerators other than NVIDIA's: Ascend's `npu-smi info` and AMD's `rocm-smi`.

Each device's memory in use and total becomes a `GpuMemory`, each process holding device memory a
`GpuProcess`, as nvidia-smi's do (nvidia_smi.py): two processes on one device is a GPU shared, whatever the
vendor.

Formats:
- npu-smi info (Ascend driver 23.x-25.x): a device is two rows, "| 0     910B3     | OK  | 93.7  38  0 / 0 |"
  (NPU id, name) then "| 0     | 0000:C1:00.0 | 0   0 / 0   3403 / 65536 |" (chip, bus id, AICore %, memory
  used / total, HBM used / total in MB: the last pair is the device memory); the process section's rows are
  "| 0       0        | 2215734       | python     | 61283     |" (NPU, chip, pid, name, memory in MB).
- rocm-smi --showmeminfo vram: "GPU[0]          : VRAM Total Memory (B): 206141652992" and
  "GPU[0]          : VRAM Total Used Memory (B): 1234567"; --showpids: "PID  PROCESS NAME  GPU(s)  VRAM USED
  SDMA USED  CU OCCUPANCY" rows ("2916773  python3  1  17180917760  0  0"; GPU(s) counts the devices, it does
  not name them, so a row's device is known only where the meminfo read shows one device).
"""

from __future__ import annotations

import re

from oomguard.diagnosis.evidence import GpuMemory, GpuProcess
from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import Context, LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers

_MB = 1 << 20  # npu-smi's MB are MiB (it divides the driver's bytes by 1024 twice)
# npu-smi's first row of a device: NPU id and the chip's name (910B3, 310P3, Ascend910...).
_NPU_ROW = re.compile(r"^\|\s*(?P<id>\d+)\s+(?P<name>[A-Za-z]*\d{3}\w*)\s*\|")
# Its second row: chip, bus id, then "used / total" pairs; the last one is the device memory (HBM).
_NPU_MEMORY = re.compile(
    r"^\|\s*\d+\s*\|\s*[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s*\|(?P<rest>.*)\|"
)
_PAIR = re.compile(r"(?P<used>\d+)\s*/\s*(?P<total>\d+)")
# A process row: NPU and chip in one cell, pid, name, memory (MB).
_NPU_PROCESS = re.compile(
    r"^\|\s*(?P<npu>\d+)\s+\d+\s*\|\s*(?P<pid>\d+)\s*\|\s*(?P<name>[^|]*?)\s*\|\s*(?P<mem>\d+)\s*\|"
)
_ROCM_MEM = re.compile(r"GPU\[(?P<gpu>\d+)\]\s*:\s*VRAM Total (?P<what>Used )?Memory \(B\):\s*(?P<v>\d+)")
_ROCM_PIDS_HEADER = re.compile(r"^\s*PID\s+PROCESS NAME\s+GPU\(s\)\s+VRAM USED\b")
_ROCM_PID_ROW = re.compile(r"^\s*(?P<pid>\d+)\s+(?P<name>\S+)\s+(?P<gpus>\d+)\s+(?P<vram>\d+)\b")


class Parser(LineParser):
    # npu-smi rows end with "|" (nvidia-smi's too: the patterns tell them apart); rocm-smi's lines name it.
    TRIGGERS = Triggers(words=("VRAM Total", "VRAM USED"), line_ends=("|",))

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.npu: tuple[int, str] | None = None  # the device whose second row comes next
        self.rocm_totals: dict[int, int] = {}
        self.rocm_pids = False  # inside a --showpids table

    def busy(self) -> bool:
        return self.rocm_pids

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body.strip()
        if self.rocm_pids:
            self._rocm_pid(line, body)
            return
        if body.startswith("|"):
            self._npu(line, body)
        elif "VRAM Total" in body:
            self._rocm_memory(line, body)
        elif _ROCM_PIDS_HEADER.match(body):
            self.rocm_pids = True

    def _npu(self, line: Line, body: str) -> None:
        process = _NPU_PROCESS.match(body)
        if process and "Bus-Id" not in body:
            self.ctx.emit(
                GpuProcess(
                    where=self.ctx.where(line),
                    text=self.ctx.clip(body),
                    gpu=int(process.group("npu")),
                    pid=int(process.group("pid")),
                    name=process.group("name"),
                    used=int(process.group("mem")) * _MB,
                )
            )
            return
        head = _NPU_ROW.match(body)
        if head:
            self.npu = (int(head.group("id")), head.group("name"))
            return
        memory = _NPU_MEMORY.match(body)
        pairs = _PAIR.findall(memory.group("rest")) if memory else []
        if pairs and self.npu is not None:
            used, total = (int(v) * _MB for v in pairs[-1])
            if total > 0:
                self.ctx.emit(
                    GpuMemory(
                        where=self.ctx.where(line),
                        text=self.ctx.clip(body),
                        gpu=self.npu[0],
                        name=self.npu[1],
                        total=total,
                        used=used,
                    )
                )
        self.npu = None

    def _rocm_memory(self, line: Line, body: str) -> None:
        m = _ROCM_MEM.search(body)
        if not m:
            return
        gpu, value = int(m.group("gpu")), int(m.group("v"))
        if not m.group("what"):
            self.rocm_totals[gpu] = value
        elif gpu in self.rocm_totals:
            self.ctx.emit(
                GpuMemory(
                    where=self.ctx.where(line),
                    text=self.ctx.clip(body),
                    gpu=gpu,
                    name="",
                    total=self.rocm_totals[gpu],
                    used=value,
                )
            )

    def _rocm_pid(self, line: Line, body: str) -> None:
        m = _ROCM_PID_ROW.match(body)
        if not m:
            self.rocm_pids = False  # the table ended
            return
        # GPU(s) counts devices; on a host with one device (the meminfo read says so) the row is on it.
        one = next(iter(self.rocm_totals)) if len(self.rocm_totals) == 1 else None
        if one is None:
            return
        self.ctx.emit(
            GpuProcess(
                where=self.ctx.where(line),
                text=self.ctx.clip(body),
                gpu=one,
                pid=int(m.group("pid")),
                name=m.group("name"),
                used=int(m.group("vram")),
            )
        )
