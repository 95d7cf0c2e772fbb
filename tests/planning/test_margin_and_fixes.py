"""Issue 11 points 2 and 5: a MARGINAL verdict from the summed bands, check failing on it, and a fix search
that aims at the band's edge, pairs capacity changes with the longest length, and finds the fewest GPUs."""

from __future__ import annotations

import json

from tests.run_oomguard import oomguard

GiB = 1 << 30
L4_32K = ["meta-llama/Llama-3.1-8B-Instruct", "--gpu", "L4", "--max-model-len", "32768"]


def test_a_fit_inside_the_bands_is_marginal_in_text_and_json() -> None:
    done = oomguard("plan", *L4_32K)
    assert done.returncode == 0
    assert done.stdout.splitlines()[3].startswith("MARGINAL")
    data = json.loads(oomguard("plan", *L4_32K, "--json").stdout)
    assert data["fits"] is True and data["verdict"] == "marginal"
    assert 0 < data["margin_bytes"] < data["margin"]["band_bytes"]
    assert data["margin"]["constraint"] == "KV sizing"


def test_a_roomy_plan_is_fits_with_its_margin() -> None:
    data = json.loads(
        oomguard(
            "plan", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--max-model-len", "8192", "--json"
        ).stdout
    )
    assert data["verdict"] == "fits" and data["margin_bytes"] > data["margin"]["band_bytes"]


def test_a_failing_plan_is_will_not_start() -> None:
    data = json.loads(oomguard("plan", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "H100", "--json").stdout)
    assert data["verdict"] == "will-not-start" and data["margin_bytes"] is None


def test_check_fails_on_marginal_unless_allowed() -> None:
    command = ["--", "vllm", "serve", *L4_32K[:1], *L4_32K[3:]]
    done = oomguard("check", "--gpu", "L4", *command)
    assert done.returncode == 1 and done.stdout.startswith("FAIL") and "marginal" in done.stdout
    assert oomguard("check", "--gpu", "L4", "--allow-marginal", *command).returncode == 0


def test_safety_sets_the_margin_a_fit_must_keep() -> None:
    roomy = ["meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--max-model-len", "8192", "--json"]
    assert json.loads(oomguard("plan", *roomy, "--safety", "1GiB").stdout)["verdict"] == "fits"
    tight = json.loads(oomguard("plan", *roomy, "--safety", "10GiB").stdout)
    assert tight["verdict"] == "marginal" and tight["margin"]["required_bytes"] == 10 * GiB


def test_fixes_keep_the_margin_never_zero() -> None:
    data = json.loads(oomguard("plan", *L4_32K, "--json").stdout)
    assert data["fixes"]
    for fix in data["fixes"]:
        argv = fix["command"].split()[2:]  # vllm serve MODEL ...
        again = json.loads(
            oomguard("plan", "--gpu", "L4", "--json", "--no-fixes", "--", "vllm", "serve", *argv).stdout
        )
        assert again["verdict"] == "fits", fix["command"]
        assert again["margin_bytes"] >= again["margin"]["band_bytes"]
    utilization = [f for f in data["fixes"] if list(f["flags"]) == ["gpu_memory_utilization"]]
    assert utilization and utilization[0]["max_concurrency"] > 1.1


def test_a_capacity_fix_is_paired_with_the_longest_length_it_holds() -> None:
    # Qwen3-14B (27.5 GiB) on a 22 GiB A10G: the weights do not load. Besides more GPUs, FP8 weights on the
    # one
    # GPU serve a shorter context, and the fix says which length.
    data = json.loads(oomguard("plan", "Qwen/Qwen3-14B", "--gpu", "A10G", "--json").stdout)
    assert data["failure"] == "weights-dont-fit"
    one_gpu = [f for f in data["fixes"] if f["gpus"] == 1]
    assert one_gpu and all(f["flags"]["quantization"] == "fp8" for f in one_gpu)
    paired = [f for f in one_gpu if "max_model_len" in f["flags"]]
    assert paired and all(0 < f["flags"]["max_model_len"] < 40960 for f in paired)
    assert data["fixes"][0]["gpus"] == 1  # the same GPU count ranks first


def test_no_fp8_weights_below_the_capability_vllm_requires() -> None:
    t4 = json.loads(
        oomguard("plan", "Qwen/Qwen3-4B", "--gpu", "T4", "--max-model-len", "40960", "--json").stdout
    )
    assert all(f["flags"].get("quantization") != "fp8" for f in t4["fixes"])
    l4 = json.loads(oomguard("plan", *L4_32K, "--json").stdout)
    assert any(f["flags"].get("quantization") == "fp8" for f in l4["fixes"])


def test_fewest_gpus_searches_every_tp_x_pp_and_fp8_and_prints_the_command() -> None:
    done = oomguard(
        "plan", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "L4", "--max-model-len", "8192", "--fewest-gpus"
    )
    assert done.returncode == 0, done.stderr
    fewest = next(line for line in done.stdout.splitlines() if line.startswith("fewest:"))
    gpus = int(fewest.split()[1])
    assert gpus < 12  # the old PP set {1,2,3,4,6,8} gave TP 4 x PP 3
    command = done.stdout.splitlines()[done.stdout.splitlines().index(fewest) + 1].split()
    again = oomguard("plan", "--gpu", "L4", "--no-fixes", "--json", "--", *command)
    data = json.loads(again.stdout)
    assert (
        data["verdict"] == "fits"
        and data["engine"]["tensor_parallel_size"] * data["engine"]["pipeline_parallel_size"] == gpus
    )


def test_fix_commands_keep_the_env_prefix() -> None:
    data = json.loads(
        oomguard(
            "plan",
            "--gpu",
            "H100",
            "--json",
            "--",
            "VLLM_DEEPEP_BUFFER_SIZE_MB=12288",
            "vllm",
            "serve",
            "Qwen/Qwen3-8B",
            "--gpu-memory-utilization",
            "0.3",
        ).stdout
    )
    assert data["fixes"]
    assert all(f["command"].startswith("VLLM_DEEPEP_BUFFER_SIZE_MB=12288 vllm serve") for f in data["fixes"])
