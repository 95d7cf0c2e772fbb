"""Host memory of a local server from /proc and cgroups, and NVML skipped cleanly where there is no GPU."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from oomguard.watch.host import (
    HostProbe,
    cgroup_memory,
    find_listening_pid,
    mem_total,
    process_tree,
    rss_bytes,
)
from oomguard.watch.nvml import NvmlProbe


def test_the_process_listening_on_a_port_is_found() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert find_listening_pid(server.getsockname()[1]) == os.getpid()


def test_a_port_nobody_listens_on_has_no_process() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening
    assert find_listening_pid(port) is None


def test_the_tree_rss_counts_children_like_vllms_engine_core() -> None:
    child = subprocess.Popen([sys.executable, "-c", 'import time; b = b"x" * (64 << 20); time.sleep(30)'])
    try:
        deadline = time.monotonic() + 10
        while (rss_bytes(child.pid) or 0) < 64 << 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.pid in process_tree(os.getpid())
        probe = HostProbe(pid=os.getpid())
        rss = next(s.value for s in probe.sample(1.0) if s.metric == "host_rss_bytes")
        assert rss >= (rss_bytes(os.getpid()) or 0) + (64 << 20)
    finally:
        child.kill()
        child.wait()


def test_the_probe_reports_a_limit_and_the_start_time() -> None:
    samples = {s.metric: s.value for s in HostProbe(pid=os.getpid(), target="u").sample(5.0)}
    cgroup = cgroup_memory(os.getpid())
    expected_limit = cgroup.limit if cgroup is not None and cgroup.limit is not None else mem_total()
    assert samples["cgroup_limit_bytes"] == expected_limit
    assert abs(samples["host_process_start_time"] - time.time()) < 24 * 3600


def test_a_gone_process_gives_no_samples() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert HostProbe(pid=child.pid).sample(1.0) == []


def _fake_proc(tmp_path: Path, cgroup_line: str) -> Path:
    proc = tmp_path / "proc"
    (proc / "42").mkdir(parents=True)
    (proc / "42" / "cgroup").write_text(cgroup_line + "\n")
    return proc


def test_cgroup_v2_usage_limit_oom_kills_and_working_set(tmp_path: Path) -> None:
    proc = _fake_proc(tmp_path, "0::/kubepods/pod1/ctr")
    base = tmp_path / "cg" / "kubepods" / "pod1" / "ctr"
    base.mkdir(parents=True)
    (base / "memory.current").write_text("8589934592\n")
    (base / "memory.max").write_text("17179869184\n")
    (base / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n")
    (base / "memory.stat").write_text("anon 6442450944\nfile 2147483648\ninactive_file 1073741824\n")
    cg = cgroup_memory(42, proc, tmp_path / "cg")
    assert cg is not None and (cg.version, cg.limit, cg.oom_kills) == (2, 16 << 30, 2)
    assert cg.working_set == (8 << 30) - (1 << 30)


def test_cgroup_v2_without_a_limit_reads_max_as_none(tmp_path: Path) -> None:
    proc = _fake_proc(tmp_path, "0::/")
    root = tmp_path / "cg"
    root.mkdir()
    (root / "memory.current").write_text("1000\n")
    (root / "memory.max").write_text("max\n")
    cg = cgroup_memory(42, proc, root)
    assert cg is not None and cg.limit is None and cg.oom_kills is None


def test_cgroup_v1_unlimited_is_none_and_limited_is_read(tmp_path: Path) -> None:
    proc = _fake_proc(tmp_path, "4:memory:/docker/abc\n0::/")
    base = tmp_path / "cg" / "memory" / "docker" / "abc"
    base.mkdir(parents=True)
    (base / "memory.usage_in_bytes").write_text("500000000\n")
    (base / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (base / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    cg = cgroup_memory(42, proc, tmp_path / "cg")
    assert cg is not None and (cg.version, cg.limit, cg.oom_kills) == (1, None, 3)
    (base / "memory.limit_in_bytes").write_text("4294967296\n")
    assert cgroup_memory(42, proc, tmp_path / "cg").limit == 4 << 30  # type: ignore[union-attr]


def test_nvml_without_a_gpu_is_skipped_with_a_reason() -> None:
    probe = NvmlProbe()
    if probe.available:  # a machine with a GPU: real samples
        assert {s.metric for s in probe.sample(1.0)} == {"gpu_memory_used_bytes", "gpu_memory_total_bytes"}
    else:
        assert probe.sample(1.0) == [] and "GPU memory not watched" in probe.reason
    probe.close()
