"""Kernel OOM-killer reports (dmesg, journalctl, /var/log/kern.log), a shell's bare "Killed", NVIDIA driver
memory errors on unified-memory parts (GB10/GH200: "NVRM ... NV_ERR_NO_MEMORY"; Jetson's nvmap:
"NvMapMemAllocInternalTagged: 1075072515 error 12"), systemd's verdict on a service the OOM killer hit
("ollama.service: Failed with result 'oom-kill'", "A process of this unit has been killed by the OOM
killer", "Consumed ..., 123.9G memory peak"), the memory cgroup's usage line of the kernel's report
("memory: usage 131072kB, limit 131072kB, failcnt 15691", mm/memcontrol.c), the other killers of a host
short of memory (systemd-oomd, Slurm's cgroup handler) and the words of the tools that saw a child die of
SIGKILL (torchrun, Python's subprocess, Go, zsh and bash, supervisord). An exit code of -9 or 137 in any
tool's words ("died, exit code: -9") is read by kubectl.py, with the other exit statuses."""

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
_NVMAP_ENOMEM = re.compile(r"\bNvMapMem\w+:(?: \d+)? error 12\b")
# Kernels before 4.19 name the victim first ("Out of memory: Kill process 1234 (python) score 912 or sacrifice
# child", mm/oom_kill.c), then "Killed process ..." on the next line.
_KILL_PROCESS = re.compile(r"\b(?:Out of memory|Memory cgroup out of memory): Kill process \d+\b")
# systemd-oomd kills a whole cgroup under memory pressure or swap use (src/oom/oomd-manager.c): "Killed
# /user.slice/.../vllm.scope due to memory pressure for /user.slice/... being 82.36% > 50.00% for > 20s with
# reclaim activity", "... due to memory used ... / total ... and swap used ..."; the unit then says
# "vllm.service: systemd-oomd killed 19 process(es) in this unit."
_OOMD = re.compile(
    r"\bKilled \S+ due to (?:memory pressure|memory used|swap used)\b|\bsystemd-oomd killed \d+ process"
)
# Slurm's cgroup plugin reading memory.events: "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=
# 1234.0. Some of your processes may have been killed by the cgroup out-of-memory handler.", and its own job
# limit enforcement "slurmstepd: error: Exceeded job memory limit" / "srun: error: node1: task 0: Out Of
# Memory".
_SLURM = re.compile(
    r"\bDetected (?P<n>\d+) oom[-_]kill event|\bExceeded (?:job|step) memory limit\b|"
    r"\btask \d+: Out Of Memory\b"
)
# A process ended by SIGKILL as the tool that waited for it says so: torchrun ("traceback : Signal 9 (SIGKILL)
# received by PID 8158", torch/distributed/elastic), Python's subprocess ("died with <Signals.SIGKILL: 9>.")
# and multiprocessing ("exitcode=-SIGKILL"), Go's os/exec ("signal: killed": ollama's "llama runner process
# has terminated: signal: killed"), zsh ("zsh: killed     python serve.py") and bash job control ("[1]+
# Killed   python serve.py"), supervisord ("WARN exited: vllm (terminated by SIGKILL; not expected)").
_SIGKILLED = re.compile(
    r"\bSignal 9 \(SIGKILL\) received by PID\b|<Signals\.SIGKILL: 9>|\bexitcode=-SIGKILL\b|"
    r"\bsignal: killed\b|\bzsh: killed\b|^\[\d+\][+-]?\s+Killed\b|\bterminated by SIGKILL\b"
)

# A process ended by another signal, as the same tools say so: Go's os/exec ("signal: segmentation fault",
# ollama's "llama runner process has terminated: signal: aborted"), torchrun ("Signal 6 (SIGABRT) received by
# PID"), Python ("<Signals.SIGSEGV: 11>", "exitcode=-SIGSEGV") and the shell ("Segmentation fault (core
# dumped)", "Aborted (core dumped)"): a crash, not a kill for memory.
_OTHER_SIGNAL = re.compile(
    r"\bsignal: (?:segmentation fault|aborted|illegal instruction|bus error|floating point exception)\b|"
    r"\bSignal \d+ \(SIG(?:SEGV|ABRT|ILL|BUS|FPE)\) received by PID\b|"
    r"<Signals\.SIG(?:SEGV|ABRT|ILL|BUS|FPE): \d+>|\bexitcode=-SIG(?:SEGV|ABRT|ILL|BUS|FPE)\b|"
    r"\b(?:Segmentation fault|Aborted|Illegal instruction) \(core dumped\)"
)


class Parser(LineParser):
    TRIGGERS = Triggers(
        words=(
            "Killed",
            "SIGKILL",
            "oom-kill:",
            "invoked oom-killer",
            "oom_reaper: reaped",
            "NV_ERR_NO_MEMORY",
            "NvMapMem",
            *_SYSTEMD_OOM,
            "memory peak",
            "failcnt",
            "Kill process",
            "due to memory pressure",
            "due to memory used",
            "due to swap used",
            "systemd-oomd killed",
            "oom-kill event",
            "oom_kill event",
            "memory limit",
            "Out Of Memory",
            "signal: killed",
            "zsh: killed",
            "signal: ",
            "SIGSEGV",
            "SIGABRT",
            "SIGILL",
            "SIGBUS",
            "SIGFPE",
            "(core dumped)",
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
        elif (
            "oom-kill:" in body
            or "invoked oom-killer" in body
            or "oom_reaper: reaped" in body
            or ("Kill process" in body and _KILL_PROCESS.search(body))
        ):
            self.ctx.signal(line, body, "kernel-oom-kill")
        elif ("due to" in body or "systemd-oomd" in body) and _OOMD.search(body):
            self.ctx.signal(line, body, "oomd-kill")
        elif (
            body.strip() in ("Killed", "Killed.")
            # each pattern only where its word is: a search tries every position of every line (H6)
            or ("Killed" in body and re.search(r"\bline \d+:\s*\d+ Killed\b", body))
            or re.match(r"^Killed\b(?! process)", body.strip())  # "Killed while loading weight"
            or (
                "SIGKILL" in body
                and re.search(r"\bkilled (?:with|by) SIGKILL\b|\bSIGKILL\b.{0,40}\b137\b", body)
            )
            or (("SIGKILL" in body or "killed" in body.lower()) and _SIGKILLED.search(body.strip()))
        ):
            self.ctx.signal(line, body, "host-killed")
        elif ("SIG" in body or "signal: " in body or "(core dumped)" in body) and _OTHER_SIGNAL.search(body):
            self.ctx.signal(line, body, "exit-not-killed")
        if "oom" in body.lower() or "Out Of Memory" in body or "memory limit" in body:
            slurm = _SLURM.search(body)
            if slurm:
                self.ctx.signal(line, body, "cgroup-oom-kill", count=float(slurm.group("n") or 1))
        # Jetson's nvmap (the Tegra GPU allocates from the same physical RAM) failing with ENOMEM:
        # "NvMapMemAllocInternalTagged: 1075072515 error 12", "NvMapMemHandleAlloc: error 12".
        if "NV_ERR_NO_MEMORY" in body or ("NvMapMem" in body and _NVMAP_ENOMEM.search(body)):
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
        # mem_cgroup_print_oom_meminfo prints this line only inside an OOM report of the cgroup.
        self.ctx.signal(line, body, "kernel-oom-kill")
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
