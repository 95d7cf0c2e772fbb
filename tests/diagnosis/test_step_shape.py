"""The failing step's arithmetic: the layer width read from the failed allocation, padded vs packed peaks
(simulate.step_memory's padded layer: its tensors alive over the step's hidden streams), and the budgets
offered as fixes, re-scheduled as vLLM's V1 scheduler would."""

from __future__ import annotations

import re

from tests.diagnosis.conftest import classes, top

from oomguard.diagnosis.evidence import OomMessage, ScheduledStep, Where
from oomguard.diagnosis.step_shape import analyse, recommended, reschedule, shape_of
from oomguard.engines.vllm.accounting import FORWARD_HIDDEN_STREAMS
from oomguard.simulation.step_memory import DEFAULT_TENSORS_ALIVE, Row, StepShape

GIB = 1 << 30
MIXED = (31344, 4, 8, 9, 10, 1352, 12, 29)  # one long new prompt with short multi-turn chunks (seed 002)


def dump(tokens: tuple[int, ...], tag: str = "(EngineCore_DP0 pid=4113) ", usage: float = 0.1319) -> str:
    per_request = ", ".join(f"'chatcmpl-{i:04x}': {n}" for i, n in enumerate(tokens))
    return (
        f"{tag}ERROR 03-02 11:41:07 [dump_input.py:79] Dumping scheduler output for model execution: "
        f"SchedulerOutput(scheduled_new_reqs=[], num_scheduled_tokens={{{per_request}}}, "
        f"total_num_scheduled_tokens={sum(tokens)}, kv_cache_usage={usage})\n"
    )


def oom(requested_gib: float, free_gib: float, tag: str = "(Worker_TP1_EP1 pid=4180) ") -> str:
    return (
        f"{tag}ERROR 03-02 11:41:07 [multiproc_executor.py:671] torch.OutOfMemoryError: CUDA out of memory. "
        f"Tried to allocate {requested_gib:.2f} GiB. GPU 1 has a total capacity of 139.80 GiB of which "
        f"{free_gib:.2f} GiB is free. Including non-PyTorch memory, this process has 135.88 GiB memory in "
        "use.\n"
    )


def step(tokens: tuple[int, ...]) -> ScheduledStep:
    return ScheduledStep(where=Where("log", 1), text="", tokens_per_request=tokens)


def message(requested: int, free: int) -> OomMessage:
    return OomMessage(where=Where("log", 2), text="", flavor="torch", requested=requested, free=free)


def padded_peak(rows: int, longest: int, tokens: int, width: int, dtype: int = 2) -> int:
    """simulate.step_memory's padded layer: its tensors alive over the step's hidden streams."""
    return (DEFAULT_TENSORS_ALIVE * rows * longest + FORWARD_HIDDEN_STREAMS * tokens) * width * dtype


def test_the_layer_width_is_read_from_a_failed_allocation_of_padded_size():
    requested = 8 * 31344 * 10240 * 2
    analysis = analyse([step(MIXED)], [message(requested, 4 * GIB)], None, 32768)
    assert analysis is not None and analysis.layout == "padded" and analysis.widths.hidden_size == 10240
    assert analysis.padded.peak_bytes == padded_peak(8, 31344, sum(MIXED), 10240)


def test_the_width_survives_the_two_decimals_the_oom_message_prints():
    printed = round(8 * 31344 * 10240 * 2 / GIB, 2) * GIB  # "4.78 GiB"
    analysis = analyse([step(MIXED)], [message(int(printed), 4 * GIB)], None, None)
    assert analysis is not None and analysis.widths.hidden_size == 10240


def test_an_allocation_of_packed_size_is_not_called_padding():
    requested = sum(MIXED) * 7168 * 2
    analysis = analyse([step(MIXED)], [message(requested, GIB)], None, None)
    assert analysis is not None and analysis.layout == "packed" and not analysis.explains_oom


def test_a_size_that_is_no_layer_width_gives_no_arithmetic():
    assert analyse([step(MIXED)], [message(123_456_789, GIB)], None, None) is None


def test_rescheduling_keeps_short_rows_and_cuts_the_long_chunk_to_the_budget():
    new = reschedule(shape_of(step(MIXED)), 8192, 8192)
    assert new.num_tokens == 8192 and new.max_prefill == 8192 - (sum(MIXED) - 31344)
    assert len(new.rows) == len(MIXED)
    assert reschedule(StepShape((Row(30000), Row(20))), 32768, 4096).max_prefill == 4096


def test_the_recommended_budget_is_the_largest_whose_peak_fits_what_the_step_had():
    requested = 8 * 31344 * 10240 * 2
    roomy = analyse([step(MIXED)], [message(requested, 4 * GIB)], None, 32768)
    tight = analyse([step(MIXED)], [message(requested, GIB // 2)], None, 32768)
    assert roomy is not None and tight is not None
    roomy_cap = int(recommended(roomy).flags["max_num_batched_tokens"])  # type: ignore[union-attr]
    tight_cap = int(recommended(tight).flags["max_num_batched_tokens"])  # type: ignore[union-attr]
    assert tight_cap < roomy_cap
    chosen = recommended(tight)
    assert chosen is not None and chosen.fits and chosen.padded.peak_bytes <= tight.available  # type: ignore[operator]


def test_seed_002_gives_the_budget_fix_with_both_peaks_from_the_arithmetic(run_diagnose):
    text = (
        "(APIServer pid=1) INFO 03-02 11:41:01 [loggers.py:257] Engine 000: Avg prompt throughput: 30112.4 "
        "tokens/s, Avg generation throughput: 212.9 tokens/s, Running: 10 reqs, Waiting: 1 reqs, GPU KV "
        "cache "
        "usage: 13.2%, Prefix cache hit rate: 61.0%\n" + dump(MIXED) + oom(4.78, 3.91)
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "activation-peak"
    cause = result["causes"][0]
    first = cause["fixes"][0]
    assert first["flags"] == {"max_num_batched_tokens": "8192", "long_prefill_token_threshold": "8192"}
    before, after = map(
        float, re.search(r"falls from ([\d.]+) to at most ([\d.]+) GiB", first["summary"]).groups()
    )
    assert before == round(padded_peak(8, 31344, sum(MIXED), 10240) / GIB, 1)
    others = sum(MIXED) - 31344
    assert after == round(padded_peak(8, 8192 - others, 8192, 10240) / GIB, 1)
    assert any("gpu-memory-utilization" in n for n in cause["does_not_help"])
    assert any(m["item"].startswith("failing step's activation (padded)") for m in result["memory"])


def test_seed_002_rocm_path_is_the_int32_overflow_of_the_padded_tensor(run_diagnose):
    text = (
        dump(MIXED)
        + "(Worker_TP1_EP1 pid=4180) ERROR 03-02 11:41:07 [multiproc_executor.py:671] RuntimeError: "
        "Expected canUse32BitIndexMath(input) && canUse32BitIndexMath(output) to be true, but got false.  "
        "(Could this error message be improved?  If so, please report an enhancement request to PyTorch.)\n"
    )
    _, result, _ = run_diagnose(text)
    assert top(result) == "int32-index-overflow"
    assert "activation-peak" in classes(result)


def test_with_the_model_known_the_planner_gives_the_width(run_diagnose):
    args = (
        "(APIServer pid=7) INFO 05-11 10:02:11 [utils.py:233] non-default args: {'model': "
        "'meta-llama/Llama-3.1-8B-Instruct', 'max_num_batched_tokens': 16384, 'enable_chunked_prefill': "
        "True}\n"
    )
    tokens = (15000, 3, 5, 900, 7, 11)
    requested = len(tokens) * 15000 * 4096 * 2 / GIB  # hidden 4096 at bf16, padded
    _, result, _ = run_diagnose(
        args + dump(tokens, tag="") + oom(requested, 0.3, tag="").replace("139.80", "79.19")
    )
    assert top(result) == "activation-peak"
    summary = result["causes"][0]["fixes"][0]["summary"]
    assert "rows of 4,096 x 2 B" in summary
