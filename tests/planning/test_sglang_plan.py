"""`oomguard plan` for SGLang: the pool from the static share of free memory, SGLang's errors, its log lines,
the CLI dispatch, and the same JSON contract as the vLLM planner's."""

from __future__ import annotations

import json

from tests.run_oomguard import oomguard

from oomguard.engines.sglang.engine import PLANNER as SGLANG
from oomguard.engines.sglang.engine import to_result
from oomguard.engines.sglang.plan import SglangRequest, plan_sglang
from oomguard.planning.fix_search import search_fixes

GiB = 1 << 30
LAUNCH = "python -m sglang.launch_server --model-path"


def test_pool_is_the_static_share_of_free_memory_minus_weights_over_the_cell() -> None:
    result = plan_sglang(
        SglangRequest.from_argv(
            f"{LAUNCH} meta-llama/Llama-3.1-8B-Instruct --mem-fraction-static 0.85", gpu="H100"
        )
    )
    r = result.rank0
    rest = int(r.free_at_init * 0.85) - r.weights.bytes
    assert abs(result.kv.kv_cache_tokens - rest // r.layout.cell_bytes) <= 1
    assert result.fits and result.errors == ()


def test_memory_held_by_other_processes_shrinks_the_pool() -> None:
    base = SglangRequest.from_argv(
        f"{LAUNCH} meta-llama/Llama-3.1-8B-Instruct --mem-fraction-static 0.85", gpu="H100"
    )
    crowded = SglangRequest(args=base.args, gpu="H100", used_by_other_processes=10 * GiB)
    assert plan_sglang(crowded).kv.kv_cache_tokens < plan_sglang(base).kv.kv_cache_tokens


def test_weights_above_the_static_share_give_sglangs_own_error() -> None:
    result = plan_sglang(
        SglangRequest.from_argv(
            f"{LAUNCH} meta-llama/Llama-3.1-70B-Instruct --tp 2 --mem-fraction-static 0.8", gpu="H100"
        )
    )
    assert not result.fits and result.failure == "no-kv-memory"
    assert result.errors == (
        (
            "Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: self.server_args.mem_fraction_static=0.8"
        ),
    )


def test_fixes_are_replanned_and_start() -> None:
    result = plan_sglang(
        SglangRequest.from_argv(
            f"{LAUNCH} meta-llama/Llama-3.1-70B-Instruct --tp 2 --mem-fraction-static 0.8", gpu="H100"
        )
    )
    fixes = search_fixes(SGLANG, result)
    assert fixes
    for fix in fixes:
        assert fix.plan.fits and fix.result.command.startswith("python -m sglang.launch_server")


def test_tensor_parallel_halves_each_ranks_weights_and_kv_heads() -> None:
    one = plan_sglang(
        SglangRequest.from_argv(f"{LAUNCH} Qwen/Qwen3-32B --mem-fraction-static 0.9", gpu="H100")
    )
    two = plan_sglang(
        SglangRequest.from_argv(f"{LAUNCH} Qwen/Qwen3-32B --tp 2 --mem-fraction-static 0.9", gpu="H100")
    )
    assert two.rank0.layout.cell_bytes * 2 == one.rank0.layout.cell_bytes
    assert abs(two.rank0.weights.bytes * 2 - one.rank0.weights.bytes) < 0.05 * one.rank0.weights.bytes


def test_log_lines_have_sglangs_format() -> None:
    result = plan_sglang(SglangRequest.from_argv(f"{LAUNCH} meta-llama/Llama-3.1-8B-Instruct", gpu="H100"))
    lines = to_result(result).log_lines
    assert lines[1].startswith("Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=")
    assert lines[2].startswith(f"KV Cache is allocated. #tokens: {result.kv.kv_cache_tokens}, K size: ")
    assert lines[-1].startswith(
        f"max_total_num_tokens={result.kv.kv_cache_tokens}, chunked_prefill_size=8192,"
    )


def test_mla_models_log_one_kv_size() -> None:
    result = plan_sglang(SglangRequest.from_argv(f"{LAUNCH} deepseek-ai/DeepSeek-V2-Lite-Chat", gpu="H100"))
    assert any(
        line.startswith("KV Cache is allocated. #tokens:") and "KV size:" in line
        for line in to_result(result).log_lines
    )


def test_a_context_longer_than_the_pool_is_a_warning_not_a_failure() -> None:
    result = plan_sglang(
        SglangRequest.from_argv(
            f"{LAUNCH} meta-llama/Llama-3.1-8B-Instruct --max-total-tokens 4096", gpu="H100"
        )
    )
    assert result.fits and result.kv.kv_cache_tokens == 4096
    assert any("rejects prompts" in w for w in result.warnings)


def test_cli_dispatches_an_sglang_command_and_keeps_the_json_contract() -> None:
    done = oomguard(
        "plan",
        "--gpu",
        "H100",
        "--json",
        "--",
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "Qwen/Qwen3-8B",
        "--tp",
        "2",
        "--some-future-flag",
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["engine_name"] == "SGLang"
    assert data["engine"]["settings"]["tp_size"] == 2
    assert data["engine"]["unknown_flags"] == ["--some-future-flag"]
    for key in ("fits", "kv_cache_tokens", "num_gpu_blocks", "max_concurrency", "ranks", "fixes", "errors"):
        assert key in data
    assert data["ranks"][0]["kv_cache_allocated_gib"] > 0


def test_cli_engine_option_and_exit_code_1_when_it_will_not_start() -> None:
    done = oomguard(
        "plan",
        "--engine",
        "sglang",
        "meta-llama/Llama-3.1-70B-Instruct",
        "--gpu",
        "H100",
        "--tp",
        "2",
        "--mem-fraction-static",
        "0.8",
    )
    assert done.returncode == 1
    assert "SGLang would fail: Not enough memory" in done.stdout


def test_cli_bad_sglang_flag_value_is_a_one_line_error() -> None:
    done = oomguard(
        "plan",
        "--",
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "Qwen/Qwen3-8B",
        "--mem-fraction-static",
        "1.5",
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "mem-fraction-static" in done.stderr


def test_weights_larger_than_free_memory_fail_at_load() -> None:
    result = plan_sglang(SglangRequest.from_argv(f"{LAUNCH} meta-llama/Llama-3.1-70B-Instruct", gpu="H100"))
    assert result.failure == "weights-dont-fit" and not result.fits


def test_json_names_the_engine_sglang_and_carries_no_vllm_key() -> None:
    import json

    done = oomguard("plan", "--json", "--gpu", "H100", "--", *LAUNCH.split(), "Qwen/Qwen3-32B", "--tp", "2")
    engine = json.loads(done.stdout)["engine"]
    assert engine["name"] == "sglang" and engine["settings"]["tp_size"] == 2
    assert "mem_fraction_static" in engine["settings"]
    vllm_keys = {
        "vllm_version",
        "gpu_memory_utilization",
        "tensor_parallel_size",
        "max_model_len",
        "max_num_seqs",
    }
    assert not vllm_keys & set(engine) and not vllm_keys & set(engine["settings"])


def test_a_plan_that_starts_has_the_margin_verdict_of_its_tightest_constraint() -> None:
    """The same verdict as vLLM's: fits with the bands to spare; --safety above the slack makes it marginal,
    and the fix search then looks for a plan that keeps the safety (a smaller static share here)."""
    command = f"{LAUNCH} Qwen/Qwen3-32B --tp 2"
    result = plan_sglang(SglangRequest.from_argv(command, gpu="H100"))
    margin = result.margin
    assert margin is not None and result.verdict == "fits"
    assert margin.spare_bytes > 0 and margin.required_bytes == margin.band_bytes > 0
    # The device-at-peak slack is what is left after everything outside the static share, as the ledger says.
    r = result.rank0
    outside = r.free_at_init - r.weights.bytes - r.kv_cache_bytes - r.req_to_token_bytes
    peak_slack = outside - r.cuda_graphs.bytes - r.activation.bytes
    assert margin.slack_bytes <= peak_slack

    asked = margin.slack_bytes + GiB
    tight = plan_sglang(SglangRequest.from_argv(command, gpu="H100", safety_bytes=asked))
    assert tight.fits and tight.verdict == "marginal" and tight.margin is not None
    assert tight.margin.required_bytes == asked
    fixes = search_fixes(SGLANG, tight)
    assert fixes and all(f.plan.verdict == "fits" for f in fixes)
    assert all(f.plan.margin is not None and f.plan.margin.spare_bytes >= 0 for f in fixes)


def test_the_cli_prints_the_margin_of_a_real_sglang_command_and_safety_makes_it_marginal() -> None:
    argv = ("plan", "--json", "--gpu", "H100", "--", *f"{LAUNCH} Qwen/Qwen3-32B --tp 2".split())
    roomy = json.loads(oomguard(*argv).stdout)
    assert roomy["verdict"] == "fits" and roomy["margin_bytes"] > 0
    assert roomy["margin"]["required_bytes"] == roomy["margin"]["band_bytes"]
    safety = roomy["margin_bytes"] + GiB
    tight = oomguard("plan", "--json", "--safety", f"{safety}B", *argv[1:])
    data = json.loads(tight.stdout)
    assert data["verdict"] == "marginal" and data["margin"]["required_bytes"] == safety
    assert data["fixes"] and "--mem-fraction-static" in data["fixes"][0]["command"]
