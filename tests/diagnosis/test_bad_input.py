"""Bad input never gives a traceback: it is skipped with a note, or the command exits 2 with one line.
A hostile pickle is never executed."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import tarfile
import zipfile
from pathlib import Path

from tests.diagnosis.conftest import top

from oomguard.diagnosis.sources.torch_snapshot import RefusedPickle, load_plain, summarize

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.19 "
    "GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has 77.6 GiB memory in use. "
    "Of the "
    "allocated memory 69.1 GiB is allocated by PyTorch, and 7.90 GiB is reserved by PyTorch but "
    "unallocated.\n"
)


class Hostile:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


def test_hostile_pickle_is_never_run_and_the_diagnosis_goes_on(run_diagnose, tmp_path: Path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"segments": [Hostile(str(marker))]})
    code, result, _ = run_diagnose(payload, OOM, names=("snapshot.pickle", "server.log"))
    assert not marker.exists()
    assert code == 0 and top(result) == "fragmentation"
    assert any("refused opcode" in s for s in result["skipped"])


def test_hostile_pickle_alone_exits_2_with_one_line(run_diagnose, tmp_path: Path):
    marker = tmp_path / "pwned"
    code, _, err = run_diagnose(pickle.dumps(Hostile(str(marker))), names=("snap.pkl",))
    assert not marker.exists()
    assert code == 2 and err.count("\n") == 1


def test_plain_snapshot_pickle_reports_largest_free_block_against_the_request():
    snap = {
        "segments": [
            {
                "total_size": 9 << 30,
                "blocks": [
                    {
                        "size": 5 << 30,
                        "state": "active_allocated",
                        "frames": [{"filename": "/x/vllm/model.py", "line": 7, "name": "forward"}],
                    },
                    {"size": 1 << 30, "state": "inactive"},
                    {"size": 2 << 30, "state": "active_allocated"},
                    {"size": 1 << 30, "state": "inactive"},
                ],
            }
        ],
        "device_traces": [[{"action": "oom", "size": 3 << 30}]],
    }
    summary = summarize(load_plain(pickle.dumps(snap, protocol=4)), "s")
    assert summary.reserved - summary.allocated == 2 << 30
    assert summary.largest_free_block == 1 << 30 and summary.failed_request == 3 << 30
    assert summary.top_sites[0] == ("/x/vllm/model.py:7 forward", 5 << 30)


def test_truncated_pickle_is_refused():
    data = pickle.dumps({"segments": []})[:-3]
    try:
        load_plain(data)
    except RefusedPickle as err:
        assert "truncated" in str(err) or "malformed" in str(err)
    else:
        raise AssertionError("a truncated pickle was accepted")


def test_empty_input_exits_2(run_diagnose):
    code, _, err = run_diagnose("")
    assert code == 2 and "no OOM evidence" in err or "no readable" in err


def test_unknown_text_exits_2_naming_what_was_read(run_diagnose):
    code, _, err = run_diagnose("lorem ipsum dolor sit amet\n" * 10)
    assert code == 2 and err.count("\n") == 1 and "evidence0.log" in err


def test_binary_file_is_skipped_and_the_rest_is_read(run_diagnose):
    code, result, _ = run_diagnose(os.urandom(4096) + b"\x00" * 10, OOM)
    assert code == 0 and top(result) == "fragmentation"
    assert any("binary" in s for s in result["skipped"])


def test_invalid_utf8_lines_are_kept_and_counted(run_diagnose):
    code, result, _ = run_diagnose(b"\xff\xfe garbage \xc3\x28\n" + OOM.encode())
    assert code == 0 and top(result) == "fragmentation"
    assert any("invalid UTF-8" in s for s in result["skipped"])


def test_a_10_mb_single_line_is_cut_and_reading_goes_on(run_diagnose):
    code, result, _ = run_diagnose(b"x" * (10 << 20) + b"\n" + OOM.encode())
    assert code == 0 and top(result) == "fragmentation"
    assert any("cut" in s for s in result["skipped"])


def test_truncated_gzip_log_uses_the_lines_before_the_cut(run_diagnose):
    data = gzip.compress((OOM + "INFO filler line\n" * 20000).encode())
    code, result, _ = run_diagnose(data[: len(data) // 2], names=("server.log.gz",))
    assert code == 0 and top(result) == "fragmentation"


def test_archive_members_are_read_in_memory_and_traversal_names_write_nothing(run_diagnose, tmp_path: Path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in (
            ("../../escape.log", OOM),
            ("logs/kubectl.txt", "Reason: OOMKilled\nExit Code: 137\n"),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    code, result, _ = run_diagnose(buf.getvalue(), names=("bundle.tar.gz",))
    assert code == 0 and not (tmp_path.parent / "escape.log").exists()
    assert any("bundle.tar.gz!../../escape.log" in r for r in result["read"])
    zbuf = io.BytesIO()
    with zipfile.ZipFile(zbuf, "w") as z:
        z.writestr("../evil.log", OOM)
    code, result, _ = run_diagnose(zbuf.getvalue(), names=("bundle.zip",))
    assert code == 0 and top(result) == "fragmentation"
    assert not (tmp_path.parent / "evil.log").exists()


def test_directory_is_walked(run_diagnose, tmp_path: Path):
    run_dir = tmp_path / "incident"
    (run_dir / "sys").mkdir(parents=True)
    (run_dir / "sys" / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 2\noom_kill 2\n")
    (run_dir / "sys" / "memory.max").write_text("68719476736\n")
    from oomguard.cli import main

    assert main(["diagnose", "--json", str(run_dir)]) == 0
