"""Host memory of a local server: RSS of its process tree, its cgroup's usage, limit and OOM kills.

Linux facts used:
- /proc/net/tcp{,6}: state 0A is LISTEN; the local address is HEX_IP:HEX_PORT; column 10 is the socket
  inode, which /proc/PID/fd/* links name as `socket:[INODE]` (how a URL's port leads to its PID).
- /proc/PID/stat: field 4 is the parent PID, field 22 the start time in clock ticks after boot
  (/proc/stat `btime`); /proc/PID/status `VmRSS` is in kB.
- cgroup v2 (/proc/PID/cgroup `0::/path`): memory.current, memory.max ("max": none), memory.events oom_kill,
  memory.stat inactive_file.
- cgroup v1 (`N:memory:/path`): memory.usage_in_bytes, memory.limit_in_bytes (PAGE_COUNTER_MAX x page
  size, about 2**63, means none), memory.oom_control `oom_kill` (kernel 4.13+), memory.stat
  total_inactive_file.
With no limit, the host's MemTotal stands in: that is what the kernel OOM killer defends.
"""

from __future__ import annotations

import os
import socket
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from oomguard.watch.samples import Sample

NO_LIMIT_V1 = 1 << 62  # any v1 limit above this is "unlimited" (the kernel writes 2**63 - page size)
TCP_LISTEN = "0A"


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def is_loopback_url(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return host.startswith("127.") or socket.inet_pton(socket.AF_INET6, host) == socket.inet_pton(
            socket.AF_INET6, "::1"
        )
    except OSError:
        return False


def url_port(url: str) -> int:
    parts = urllib.parse.urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[str]:
    inodes: set[str] = set()
    for table in ("net/tcp", "net/tcp6"):
        text = _read(proc / table)
        for line in (text or "").splitlines()[1:]:
            cols = line.split()
            if len(cols) > 9 and cols[3] == TCP_LISTEN and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def find_listening_pid(port: int, proc: Path = Path("/proc")) -> int | None:
    """The PID holding a LISTEN socket on `port`, when this user may see it."""
    inodes = {f"socket:[{inode}]" for inode in listening_inodes(port, proc)}
    if not inodes:
        return None
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    return int(entry.name)
        except OSError:
            continue  # gone, or not ours to look at
    return None


def _stat_fields(pid: int, proc: Path) -> list[str] | None:
    text = _read(proc / str(pid) / "stat")
    if text is None or ")" not in text:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    return [str(pid), "comm"] + text[text.rindex(")") + 2 :].split()


def process_tree(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """`pid` and all its descendants (vLLM's engine core and workers are children of the API server)."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name), proc)
            if fields is not None:
                children.setdefault(int(fields[3]), []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, ()))
    return tree


def rss_bytes(pid: int, proc: Path = Path("/proc")) -> int | None:
    for line in (_read(proc / str(pid) / "status") or "").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


def start_time(pid: int, proc: Path = Path("/proc")) -> float | None:
    fields = _stat_fields(pid, proc)
    btime = next(
        (
            int(line.split()[1])
            for line in (_read(proc / "stat") or "").splitlines()
            if line.startswith("btime ")
        ),
        None,
    )
    if fields is None or btime is None or len(fields) < 22:
        return None
    return btime + int(fields[21]) / os.sysconf("SC_CLK_TCK")


def mem_total(proc: Path = Path("/proc")) -> int | None:
    for line in (_read(proc / "meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


@dataclass(frozen=True)
class CgroupMemory:
    version: int
    path: Path
    usage: int | None
    limit: int | None  # None: no limit
    oom_kills: int | None
    inactive_file: int | None = None

    @property
    def working_set(self) -> int | None:
        """usage - inactive file cache: what kubelet calls the working set (cache the kernel can drop)."""
        if self.usage is None:
            return None
        return max(0, self.usage - (self.inactive_file or 0))


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def _keyed(text: str | None, key: str) -> int | None:
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
            return _int_or_none(parts[1])
    return None


def cgroup_memory(
    pid: int, proc: Path = Path("/proc"), root: Path = Path("/sys/fs/cgroup")
) -> CgroupMemory | None:
    """The memory cgroup of `pid`: v2 unified or v1 `memory` controller, whichever holds its numbers."""
    lines = (_read(proc / str(pid) / "cgroup") or "").splitlines()
    v1 = next(
        (
            ln.split(":", 2)[2]
            for ln in lines
            if ln.count(":") >= 2 and "memory" in ln.split(":")[1].split(",")
        ),
        None,
    )
    v2 = next((ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")), None)
    if v1 is not None:
        for base in (
            root / "memory" / v1.lstrip("/"),
            root / "memory",
        ):  # inside a cgroup namespace: the root
            usage = _int_or_none(_read(base / "memory.usage_in_bytes"))
            if usage is not None:
                limit = _int_or_none(_read(base / "memory.limit_in_bytes"))
                return CgroupMemory(
                    1,
                    base,
                    usage,
                    limit if limit is not None and limit < NO_LIMIT_V1 else None,
                    _keyed(_read(base / "memory.oom_control"), "oom_kill"),
                    _keyed(_read(base / "memory.stat"), "total_inactive_file"),
                )
    if v2 is not None:
        for base in (root / v2.lstrip("/"), root / "unified" / v2.lstrip("/"), root):
            usage = _int_or_none(_read(base / "memory.current"))
            if usage is not None:
                limit_text = (_read(base / "memory.max") or "max").strip()
                return CgroupMemory(
                    2,
                    base,
                    usage,
                    None if limit_text == "max" else _int_or_none(limit_text),
                    _keyed(_read(base / "memory.events"), "oom_kill"),
                    _keyed(_read(base / "memory.stat"), "inactive_file"),
                )
    return None


class HostProbe:
    """Samples of one local server: tree RSS, start time, cgroup working set/limit/OOM kills.

    Bound to a PID, or to a port whose listener is looked up again whenever the last one is gone, so a
    restarted server (new PID, same port) stays watched and its new start time shows the restart.
    """

    def __init__(
        self,
        *,
        pid: int | None = None,
        port: int | None = None,
        target: str | None = None,
        proc: Path = Path("/proc"),
        cgroup_root: Path = Path("/sys/fs/cgroup"),
    ) -> None:
        if (pid is None) == (port is None):
            raise ValueError("give exactly one of pid and port")
        self.pid = pid
        self.port = port
        self.proc = proc
        self.cgroup_root = cgroup_root
        # A probe found by a URL's port reports under that URL, beside the server's own /metrics series.
        self.target = target or (f"host:pid {pid}" if pid is not None else f"host:port {port}")
        self._resolved: int | None = pid

    def current_pid(self) -> int | None:
        if self._resolved is not None and (self.proc / str(self._resolved) / "stat").exists():
            return self._resolved
        self._resolved = find_listening_pid(self.port, self.proc) if self.port is not None else None
        return self._resolved

    def sample(self, now: float) -> list[Sample]:
        pid = self.current_pid()
        if pid is None:
            return []
        out: list[Sample] = []
        rss = [r for r in (rss_bytes(p, self.proc) for p in process_tree(pid, self.proc)) if r is not None]
        if rss:
            out.append(Sample(self.target, "", "host_rss_bytes", now, float(sum(rss))))
        started = start_time(pid, self.proc)
        if started is not None:
            # its own series: for a loopback URL the endpoint's process_start_time is beside it (the listener
            # found by port may be a proxy, whose start time says nothing about vLLM's)
            out.append(Sample(self.target, "", "host_process_start_time", now, started))
        cgroup = cgroup_memory(pid, self.proc, self.cgroup_root)
        limit = cgroup.limit if cgroup is not None and cgroup.limit is not None else mem_total(self.proc)
        if cgroup is not None and cgroup.working_set is not None:
            out.append(Sample(self.target, "", "cgroup_memory_bytes", now, float(cgroup.working_set)))
        if cgroup is not None and cgroup.oom_kills is not None:
            out.append(Sample(self.target, "", "oom_kills", now, float(cgroup.oom_kills)))
        if limit is not None:
            out.append(Sample(self.target, "", "cgroup_limit_bytes", now, float(limit)))
        return out
