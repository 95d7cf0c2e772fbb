"""The same log gives the same answer whatever its framing (the reliability campaign's W6 and U1): CR-only
line endings, Docker's json-file records, UTF-16 with and without a BOM (what PowerShell 5.1's `>` writes),
bzip2 and xz compression. The logs are real vLLM text: a host-RAM mmap failure at load and a weights OOM."""

from __future__ import annotations

import bz2
import codecs
import json
import lzma
from collections.abc import Callable

import pytest
from tests.diagnosis.conftest import top

from oomguard.diagnosis.framing import Framing, framing_of

HOST_RAM = (
    'ERROR 06-02 09:39:03 [core.py:396]   File "/opt/img/site-packages/vllm/model_executor/model_loader/'
    'weight_utils.py", line 441, in safetensors_weights_iterator\n'
    'ERROR 06-02 09:39:03 [core.py:396]     with safe_open(st_file, framework="pt") as f:\n'
    "ERROR 06-02 09:39:03 [core.py:396] RuntimeError: unable to mmap 16933256392 bytes from file "
    "</models/model.safetensors>: Cannot allocate memory (12)\n"
)
WEIGHTS = (
    '[rank0]:   File "/x/vllm/model_executor/models/llama.py", line 400, in __init__\n'
    "[rank0]:     self.lm_head = ParallelLMHead(\n"
    '[rank0]:   File "/x/vllm/model_executor/layers/vocab_parallel_embedding.py", line 28, in '
    "create_weights\n"
    "[rank0]:     weight = Parameter(torch.empty(sum(output_partition_sizes),\n"
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1002.00 MiB. GPU 0 has a total "
    "capacity of 15.59 GiB of which 940.12 MiB is free. Including non-PyTorch memory, this process has 14.30 "
    "GiB memory in use. Of the allocated memory 14.01 GiB is allocated by PyTorch, and 15.49 MiB is reserved "
    "by PyTorch but unallocated.\n"
)


def _docker(text: str) -> bytes:
    records = (
        json.dumps(
            {"log": line, "stream": "stderr", "time": "2026-06-02T09:39:03.123456789Z"}, separators=(",", ":")
        )
        for line in text.splitlines(keepends=True)
    )
    return "".join(r + "\n" for r in records).encode()


def _docker_split(text: str) -> bytes:
    """Docker splits a line longer than 16 KiB over records; here every line is split in two."""
    out = []
    for line in text.splitlines(keepends=True):
        half = len(line) // 2
        out += [{"log": line[:half], "stream": "stderr"}, {"log": line[half:], "stream": "stderr"}]
    return "".join(json.dumps(r) + "\n" for r in out).encode()


FRAMINGS: dict[str, Callable[[str], bytes]] = {
    "cr-only": lambda t: t.replace("\n", "\r").encode(),
    "docker-json": _docker,
    "docker-json split lines": _docker_split,
    "utf-16 with BOM": lambda t: t.encode("utf-16"),
    "utf-16-le": lambda t: t.encode("utf-16-le"),
    "utf-16-be": lambda t: t.encode("utf-16-be"),
    "bzip2": lambda t: bz2.compress(t.encode()),
    "xz": lambda t: lzma.compress(t.encode()),
}


@pytest.mark.parametrize("log", [HOST_RAM, WEIGHTS], ids=["host-ram", "weights"])
@pytest.mark.parametrize("framing", list(FRAMINGS))
def test_w6_u1_the_framing_does_not_change_the_answer(run_diagnose, log: str, framing: str) -> None:  # type: ignore[no-untyped-def]
    _, plain, _ = run_diagnose(log)
    code, framed, err = run_diagnose(FRAMINGS[framing](log))
    assert code == 0, err
    assert top(framed) == top(plain) and framed["causes"][0]["confidence"] == plain["causes"][0]["confidence"]


def test_framing_is_recognised_from_the_head_only_when_it_is_there() -> None:
    assert framing_of(HOST_RAM.encode()) is Framing.PLAIN
    assert framing_of(HOST_RAM.replace("\n", "\r\n").encode()) is Framing.PLAIN  # CRLF: lines already end
    assert framing_of(HOST_RAM.replace("\n", "\r").encode()) is Framing.CR_ONLY
    assert framing_of(_docker(HOST_RAM)) is Framing.DOCKER_JSON
    assert framing_of(b'{"log": "a JSON log of some other shape"}\n{"x": 1}\n') is Framing.PLAIN
    assert framing_of(codecs.BOM_UTF16_LE + HOST_RAM.encode("utf-16-le")) is Framing.UTF16_BOM
    assert framing_of(HOST_RAM.encode("utf-16-le")) is Framing.UTF16_LE
    assert framing_of(bytes(range(256)) * 4) is Framing.PLAIN  # binary stays binary
    assert (
        framing_of(b"\x80\x04\x95" + b"\x00a" * 100) is Framing.PLAIN
    )  # a pickle goes to the snapshot reader


def test_u1_a_utf16_metrics_scrape_is_still_a_scrape(run_diagnose) -> None:  # type: ignore[no-untyped-def]
    prom = 'vllm:num_requests_running{engine="0"} 3\nvllm:kv_cache_usage_perc{engine="0"} 0.99\n'
    code, result, err = run_diagnose(prom.encode("utf-16"), names=("metrics.prom",))
    assert code == 0, err
    assert "prometheus-metrics, 2 lines, 1 facts" in result["read"][0], result["read"]


def test_a_corrupt_xz_log_is_a_note_not_a_crash(run_diagnose) -> None:  # type: ignore[no-untyped-def]
    data = lzma.compress(WEIGHTS.encode() * 50)
    code, result, _ = run_diagnose(data[: len(data) // 2] + b"\0" * 64 + data[len(data) // 2 :], WEIGHTS)
    assert code == 0 and any("corrupt" in note or "truncated" in note for note in result["skipped"])
