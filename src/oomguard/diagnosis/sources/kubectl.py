"""`kubectl describe pod` (Last State, Reason, Exit Code, Restart Count, Limits) and `kubectl get events`
(OOMKilling, Evicted, BackOff), plus the exit-status lines of docker and systemd."""

from __future__ import annotations

import re
import shlex

from oomguard.diagnosis.evidence import Flags, HostMemory, Version
from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import Context, LineParser, Message, log_size
from oomguard.diagnosis.sources.triggers import Triggers
from oomguard.diagnosis.sources.vllm_log import parse_argv

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
# A process's exit status as each tool prints it: kubectl ("Exit Code: 137"), docker ("exited with code 137",
# `docker ps` "Exited (137) 2 minutes ago", inspect "ExitCode": 137), shells and Go ("exit status 137"),
# Python's subprocess ("returned non-zero exit status 137"), torchrun ("exitcode  : -9 (pid: 8158)",
# "failed (exitcode: -9)"), vLLM V0's multiproc executor ("Worker VllmWorkerProcess pid 1867 died, exit code:
# -9", vllm/executor/multiproc_worker_utils.py), docker compose ("exits with error code 137").
_EXIT = re.compile(
    r"(?:Exit Code:\s*|exit code[: ]\s*|exited with code\s*|ExitCode[\":\s]*|\bexit[ =]|\(exit\s|"
    r"\bexit status\s+|\berror code\s+|\bexitcode\s*[:=]\s*|\bExited\s+\()(?P<c>-?\d+)\b",
    re.IGNORECASE,
)
# vLLM V1's engine launcher names each engine core process that died with its exit code (negative: the signal
# that ended it): "Engine core initialization failed. See root cause above. Failed core proc(s):
# {'EngineCore_DP0': -9}" (vllm/v1/engine/utils.py, wait_for_engine_startup).
_CORE_PROCS = re.compile(r"Failed core proc\(s\): \{(?P<procs>[^}]*)\}")
_PROC_CODE = re.compile(r":\s*(?P<c>-?\d+)\b")
# The exit statuses of a process ended by SIGKILL (signal 9): 128 + 9 from a shell or a container runtime,
# -9 from Python's multiprocessing and subprocess (a negative exit code is the signal).
SIGKILL_EXITS = frozenset({137, -9})
# A container platform's own words for the kill at its memory limit: AWS ECS's stopped reason
# "OutOfMemoryError: Container killed due to memory usage", Cloud Run's "Memory limit of 16384 MiB exceeded
# with 16502 MiB used", and the generic "OOM-killed" / "oom killed".
_PLATFORM_OOM_KILL = re.compile(
    r"\bContainer killed due to memory usage\b|\bMemory limit of [\d.]+ ?[KMG]i?B exceeded\b|"
    r"\b(?:OOM|oom)[- _]killed\b"
)
_NOT_OOM_KILLED = re.compile(r"\bOOMKilled\W{0,3}\s*false\b", re.IGNORECASE)
_RESTARTS = re.compile(r"Restart Count:\s*(?P<n>\d+)")
# A `docker stats` / `podman stats` row: "3f1c2a9b8d7e   vllm   0.05%   15.5GiB / 15.6GiB   99.36%   ..."
# (CPU %, MEM USAGE / LIMIT, MEM %): the container's memory and its cgroup limit.
_STATS_ROW = re.compile(
    r"\s(?P<cpu>[\d.]+)%\s+(?P<used>[\d.]+\s?[kKMGT]i?B) / (?P<limit>[\d.]+\s?[kKMGT]i?B)\s+(?P<pct>[\d.]+)%"
)


# kubectl describe: "    Image:          vllm/vllm-openai:v0.10.2" (the tag is the engine's version).
_IMAGE = re.compile(
    r"^\s*Image:\s*(?P<image>\S*(?P<engine>vllm|sglang)\S*?):v?(?P<v>\d+\.\d+(?:\.\d+)?[\w.+-]*)\s*$"
)
_SPEC_KEY = re.compile(r"^(?P<indent>\s*)(?P<key>Command|Args):\s*(?P<rest>.*)$")
# Lines without one of these are not kubectl's or docker's (the section headers are among them).
_WORDS = (
    "xit",
    "rror code",
    "core proc",
    "System OOM",
    "OOM-killed",
    "OOM killed",
    "OOM_killed",
    "oom-killed",
    "oom killed",
    "oom_killed",
    "Container killed",
    "Memory limit of",
    "iB / ",
    "OOMKill",
    "Restart",
    "Limits",
    "Requests",
    "memory",
    "Evicted",
    "KILL",
)


class Parser(LineParser):
    # The container spec's "Image:", "Command:" and "Args:" open what _container_spec reads; inside the
    # Command/Args block the parser is busy (every item line matters).
    TRIGGERS = Triggers(words=(*_WORDS, "Image:", "Command:", "Args:"))

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.section = ""  # 'limits' | 'requests' while inside those blocks of kubectl describe
        self.argv: list[str] = []  # the container's Command: and Args: items, in order
        self.argv_start: Line | None = None
        self.argv_indent = -1  # the indent of the items under Command:/Args:; -1 outside those blocks

    def feed(self, line: Line, msg: Message) -> None:
        if self._container_spec(line):
            return
        body = line.text.strip()
        if not any(k in body for k in _WORDS):
            return
        if body.startswith("Limits:"):
            self.section = "limits"
            return
        if body.startswith("Requests:"):
            self.section = "requests"
            return
        # docker inspect prints the flag either way ("OOMKilled": false is every container's state)
        if ("OOMKill" in body and not _NOT_OOM_KILLED.search(body)) or (
            ("killed" in body or "Memory limit of" in body) and _PLATFORM_OOM_KILL.search(body)
        ):
            self.ctx.signal(line, body, "oom-killed")
        # each pattern's words first: a caseless search tries every position of every line (H6)
        low = body.lower()
        m = _EXIT.search(body) if "exit" in low or "error code" in low else None
        if m and int(m.group("c")) in SIGKILL_EXITS:
            self.ctx.signal(line, body, "exit-137", exit_code=int(m.group("c")))
        elif m and int(m.group("c")) != 0:
            # An exit by another status or signal (1, -6, 139): the process ended itself or crashed, it was
            # not killed for memory.
            self.ctx.signal(line, body, "exit-not-killed", exit_code=int(m.group("c")))
        procs = _CORE_PROCS.search(body) if "Failed core proc" in body else None
        if procs and any(
            int(c.group("c")) in SIGKILL_EXITS for c in _PROC_CODE.finditer(procs.group("procs"))
        ):
            self.ctx.signal(line, body, "exit-137")
        if "status=9/KILL" in body:
            self.ctx.signal(line, body, "exit-137")
        # The eviction's reason ("Evicted") and its message on the next line: "The node was low on resource:
        # memory. ... Container vllm was using 61Gi, which exceeds its request of 0." (the kubelet's eviction
        # manager)
        if ("Evicted" in body and "memory" in low) or "low on resource: memory" in body:
            self.ctx.signal(line, body, "oom-killed")
        # The kubelet's event for a kernel OOM kill on the node: "System OOM encountered, victim process:
        # python3, pid: 4101" (pkg/kubelet/oom, reason SystemOOM).
        if "System OOM encountered" in body:
            self.ctx.signal(line, body, "kernel-oom-kill")
        stats = _STATS_ROW.search(body) if "iB / " in body else None
        if stats:
            for quantity, group in (("current", "used"), ("limit", "limit")):
                size = log_size(stats.group(group))
                if size:
                    self.ctx.emit(
                        HostMemory(
                            where=self.ctx.where(line),
                            text=self.ctx.clip(body),
                            quantity=quantity,
                            value=size,
                            scope="container",
                        )
                    )
        r = _RESTARTS.search(body) if "Restart Count:" in body else None
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

    def finish(self) -> None:
        self._flush_argv()

    def busy(self) -> bool:
        return self.argv_indent >= 0

    def _container_spec(self, line: Line) -> bool:
        """The container's image tag (the engine version) and its Command:/Args: lists (the server command,
        one item per line), so the setup is read from `kubectl describe pod` alone."""
        text = line.text.rstrip()
        image = _IMAGE.match(text)
        if image:
            self.ctx.emit(
                Version(
                    where=self.ctx.where(line),
                    text=self.ctx.clip(text),
                    engine=image.group("engine"),
                    version=image.group("v"),
                )
            )
            return True
        key = _SPEC_KEY.match(text)
        if key:
            if key.group("key") == "Command":
                self._flush_argv()
            self.argv_start = self.argv_start or line
            self.argv_indent = len(key.group("indent")) + 1
            if key.group("rest"):
                self.argv.extend(key.group("rest").split())
            return True
        if self.argv_indent >= 0:
            indent = len(text) - len(text.lstrip())
            if text.strip() and indent >= self.argv_indent and not re.match(r"^\s*[A-Z][\w ]*:(\s|$)", text):
                self.argv.append(text.strip())
                return True
            self.argv_indent = -1
        return False

    def _flush_argv(self) -> None:
        argv, start = self.argv, self.argv_start
        self.argv, self.argv_start, self.argv_indent = [], None, -1
        if not argv or start is None:
            return
        joined = " ".join(shlex.quote(a) for a in argv)
        m = re.search(r"\bvllm\s+serve\b|vllm\.entrypoints\.openai\.api_server|sglang\.launch_server", joined)
        rest = joined[m.end() :] if m else joined
        if not m and not any(a.startswith("--") for a in argv):
            return
        flags = parse_argv(rest, positional_model=bool(m and "serve" in m.group(0)))
        if m and "sglang" in m.group(0):
            flags["engine"] = "sglang"
        if flags:
            self.ctx.emit(
                Flags(
                    where=self.ctx.where(start),
                    text=self.ctx.clip(" ".join(argv)),
                    origin="command-line",
                    flags=tuple(flags.items()),
                )
            )
