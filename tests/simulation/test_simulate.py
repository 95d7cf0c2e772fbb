"""`oomguard simulate` end to end: OOM events from step shapes, the planner's pool, outputs, sweeps."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from tests.simulation.conftest import seed002_args, seed002_trace

from oomguard.cli import main as oomguard
from oomguard.simulation.kv_pool import KvCacheManager, KvGroupSpec
from oomguard.simulation.scheduler import KeyInterner, SimRequest


def _simulate(capsys: pytest.CaptureFixture[str], *argv: str, code: int = 0) -> dict:
    assert oomguard(["simulate", *argv, "--json"]) == code
    return json.loads(capsys.readouterr().out)


def test_a_trace_with_seed002s_shape_finds_the_padded_oom(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _simulate(capsys, *seed002_args(shared_data, seed002_trace(tmp_path), "padded"), code=1)
    assert out["oom_events"] >= 1
    first = out["oom_event_list"][0]
    assert first["peak_bytes"] > first["headroom_bytes"]
    assert "prefills" in first["shape"] and first["kv_usage"] < 0.5  # KV is not what runs out
    # The automatic search over the step flags finds the largest clean values below the ones in force.
    fixes = {f["flag"]: f for f in out["fixes"]}
    assert fixes["max_num_batched_tokens"]["value"] < 32768
    assert fixes["long_prefill_token_threshold"]["value"] < 32768
    assert all(isinstance(f["throughput_change"], float) for f in out["fixes"])


def test_the_oom_line_carries_the_fix_and_it_is_clean(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = seed002_args(shared_data, seed002_trace(tmp_path), "padded")
    assert oomguard(["simulate", *argv]) == 1
    text = capsys.readouterr().out
    oom_line = text.index("OOM events")
    fix = re.search(r"fix: (--[a-z-]+) (\d+) \(clean replay; throughput ([+-][0-9.]+)%", text[oom_line:])
    assert fix is not None, text
    assert "padding up to" in text  # the padded layout reports its padding
    # Replaying with the fix applied is clean: exit 0.
    flag, value = fix.group(1), fix.group(2)
    if flag in argv:
        swapped = [value if prev == flag else word for prev, word in zip(["", *argv], argv)]
    else:
        swapped = [*argv, flag, value]
    assert oomguard(["simulate", *swapped, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["oom_events"] == 0


def test_the_same_trace_packed_has_no_oom(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _simulate(capsys, *seed002_args(shared_data, seed002_trace(tmp_path), "packed"))
    assert out["oom_events"] == 0 and out["fixes"] is None
    assert out["peak_bytes"] < 11.8 * 2**30


def test_a_packed_run_prints_no_padding(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert oomguard(["simulate", *seed002_args(shared_data, seed002_trace(tmp_path), "packed")]) == 0
    text = capsys.readouterr().out
    assert "layout packed)" in text and "padding" not in text


def test_pool_and_blocks_per_request_come_from_the_planner(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from oomguard.planning import PlanRequest, plan

    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"arrival_s": 0, "prompt_tokens": 8000, "output_tokens": 2}) + "\n")
    flags = ["--max-model-len", "8192", "--gpu", "H100"]
    out = _simulate(capsys, str(trace), "--model", "meta-llama/Llama-3.1-8B-Instruct", *flags)
    planned = plan(
        PlanRequest(model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100", flags={"max_model_len": 8192})
    )
    assert out["setup"]["num_gpu_blocks"] == planned.kv.num_gpu_blocks
    assert out["usable_blocks"] == planned.kv.num_gpu_blocks - 1
    # One request of 8,000 prompt tokens holds cdiv(8001, 16) blocks at its peak (prompt + first output).
    assert out["max_kv_blocks_used"] == -(-8001 // planned.kv.block_size)


def test_sliding_window_groups_free_blocks_behind_the_window() -> None:
    kv = KvCacheManager(
        (KvGroupSpec("sliding_window", 16, 128), KvGroupSpec("full", 16)), 3000, 8192, 2048, False
    )
    r = SimRequest("a", 0, 4808, 10, 0)
    assert kv.allocate_slots(r, 0, 2048, full_sequence_must_fit=True)
    assert kv.group_blocks() == [128, 128]
    assert kv.allocate_slots(r, 2048, 2048)
    # 120 blocks fell out of the 128-token window and went back to the pool (vLLM 0.33 oracle: [136, 256]).
    assert kv.group_blocks() == [136, 256]


def test_prefix_cache_hits_whole_blocks_of_a_shared_prefix() -> None:
    interner = KeyInterner()
    kv = KvCacheManager((KvGroupSpec("full", 16),), 1000, 8192, 2048, True)
    first = SimRequest("a", 0, 1500, 5, 0, (7, 8, 9), interner)
    assert kv.allocate_slots(first, 0, 1500, full_sequence_must_fit=True)
    kv.free(first)
    second = SimRequest("b", 1, 1200, 5, 0, (7, 8, 11), interner)
    _, hit, _ = kv.computed_blocks(second)
    assert hit == 1024  # the two shared 512-token ids; the third id differs


def test_html_page_is_self_contained_and_well_formed(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "sim.html"
    argv = seed002_args(shared_data, seed002_trace(tmp_path), "padded")
    _simulate(capsys, *argv, "--html", str(page), "--no-fix-search", code=1)

    class Checker(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.stack: list[str] = []
            self.ids: set[str] = set()
            self.external: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            a = dict(attrs)
            if a.get("id"):
                self.ids.add(str(a["id"]))
            for key in ("src", "href"):
                if a.get(key):
                    self.external.append(str(a[key]))
            if tag not in ("meta", "line", "path", "col", "br", "img", "input"):
                self.stack.append(tag)

        def handle_endtag(self, tag: str) -> None:
            if tag in ("line", "path"):
                return
            assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1:]}>"
            self.stack.pop()

    checker = Checker()
    checker.feed(page.read_text())
    assert checker.stack == []
    assert {
        "summary",
        "kv-chart",
        "running-chart",
        "waiting-chart",
        "peak-chart",
        "oom-events",
    } <= checker.ids
    assert checker.external == []  # nothing fetched from the network


def test_timeline_csv_and_png_are_written(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    csv_path, png = tmp_path / "t.csv", tmp_path / "t.png"
    out = _simulate(
        capsys,
        *seed002_args(shared_data, seed002_trace(tmp_path), "packed"),
        "--timeline",
        str(csv_path),
        "--plot",
        str(png),
    )
    lines = csv_path.read_text().splitlines()
    assert lines[0].startswith("step,time,duration,tokens") and len(lines) == out["steps"] + 1
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_names_the_largest_safe_value(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = seed002_args(shared_data, seed002_trace(tmp_path), "padded")
    out = _simulate(capsys, *argv, "--sweep", "max_num_batched_tokens=2048,8192,32768")
    by_value = {run["value"]: run for run in out["runs"]}
    assert by_value["32768"]["oom_events"] > 0
    assert by_value["2048"]["oom_events"] == 0
    safe = [v for v, run in by_value.items() if run["oom_events"] == 0]
    assert out["largest_safe"] == max(safe, key=int)


def _one_full_length_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], model: str, blocks: int, code: int = 0
) -> dict:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        json.dumps({"arrival_s": 0, "prompt_tokens": FULL_LENGTH - 1, "output_tokens": 1}) + "\n"
    )
    return _simulate(
        capsys,
        str(trace),
        "--model",
        model,
        "--gpu",
        "H100",
        "--max-model-len",
        str(FULL_LENGTH),
        "--num-gpu-blocks-override",
        str(blocks),
        code=code,
    )


FULL_LENGTH = 16384


def test_a_pool_of_the_planners_blocks_per_request_admits_one_full_length_request_and_no_fewer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from oomguard.planning import PlanRequest, plan

    model = "meta-llama/Llama-3.1-8B-Instruct"
    planned = plan(PlanRequest(model=model, gpu="H100", flags={"max_model_len": FULL_LENGTH}))
    # vLLM reserves the whole sequence at admission; block 0 is the null block.
    enough = _one_full_length_request(tmp_path, capsys, model, planned.kv.blocks_per_request + 1)
    assert (enough["finished"], enough["unservable"]) == (1, 0)
    # A request the pool never holds is a KV failure: exit 1.
    short = _one_full_length_request(tmp_path, capsys, model, planned.kv.blocks_per_request, code=1)
    assert (short["finished"], short["unservable"]) == (0, 1)


def test_a_hybrid_models_blocks_per_request_from_the_planner_are_enough_for_one_full_length_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from oomguard.planning import PlanRequest, plan

    model = "openai/gpt-oss-20b"  # sliding-window and full-attention groups in one pool
    planned = plan(PlanRequest(model=model, gpu="H100", flags={"max_model_len": FULL_LENGTH}))
    enough = _one_full_length_request(tmp_path, capsys, model, planned.kv.blocks_per_request + 1)
    assert (enough["finished"], enough["unservable"]) == (1, 0)
    # The sliding-window group held far fewer blocks than its admission reservation at the peak.
    assert enough["max_kv_blocks_used"] < planned.kv.blocks_per_request


@pytest.mark.parametrize("disable_hybrid", [False, True])
def test_simulate_and_plan_agree_on_gpt_oss_kv_groups(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], disable_hybrid: bool
) -> None:
    """One model reader: a local gpt-oss-20b with --disable-hybrid-kv-cache-manager is one full-attention
    group in `plan` (as in vLLM) and in `simulate --num-gpu-blocks-override`; without it, both see the
    sliding-window and full-attention groups."""
    from oomguard.planning import PlanRequest, plan

    model = str(shared_data.parent / "tools/vllm_oracle/configs/gpt-oss-20b")
    flags = {"max_model_len": 8192, "disable_hybrid_kv_cache_manager": disable_hybrid}
    planned = plan(PlanRequest(model=model, gpu="H100", flags=flags))
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"arrival_s": 0, "prompt_tokens": 100, "output_tokens": 2}) + "\n")
    argv = [str(trace), "--model", model, "--max-model-len", "8192", "--num-gpu-blocks-override", "4000"]
    if disable_hybrid:
        argv.append("--disable-hybrid-kv-cache-manager")
    out = _simulate(capsys, *argv)
    assert out["setup"]["kv_groups"] == [str(g.kind) for g in planned.kv.groups]
    assert set(out["setup"]["kv_groups"]) == ({"full"} if disable_hybrid else {"sliding_window", "full"})
