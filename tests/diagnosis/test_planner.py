"""The recovered setup goes to the planner whole (version, GPU total, parallelism, flags, environment, what
other processes held, the terms the engine logged), the plan reproduces the logged KV memory, and the
planner's fixes come back re-planned."""

from __future__ import annotations

import io

from tests.diagnosis.conftest import top

from oomguard.diagnosis.evidence import Evidence
from oomguard.diagnosis.planner import calibrated, plan_request, plan_setup
from oomguard.diagnosis.read import read_one
from oomguard.diagnosis.setup import recover_setup

GIB = 1 << 30
STARTUP = """\
(APIServer pid=1) INFO 06-01 09:20:15 [api_server.py:1885] vLLM API server version 0.11.0
(APIServer pid=1) INFO 06-01 09:20:16 [utils.py:278] non-default args: {'model': 'meta-llama/Llama-3.1-8B-Instruct', 'max_model_len': 131072, 'gpu_memory_utilization': 0.9}
(EngineCore_DP0 pid=312) INFO 06-01 09:20:40 [gpu_model_runner.py:2653] Model loading took 14.99 GiB and 30.1 seconds
(EngineCore_DP0 pid=312) INFO 06-01 09:21:05 [gpu_worker.py:298] Available KV cache memory: 3.18 GiB
(EngineCore_DP0 pid=312) ERROR 06-01 09:21:05 [core.py:708] ValueError: To serve at least one request with the model's max seq len (131072), (16.0 GiB KV cache is needed, which is larger than the available KV cache memory (3.18 GiB). Based on the available memory, the estimated maximum model length is 26048. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
"""  # noqa: E501
SMI = """index, name, memory.total [MiB], memory.used [MiB], memory.free [MiB]
0, NVIDIA GeForce RTX 4090, 24564 MiB, 1 MiB, 24100 MiB
"""


def evidence_of(*texts: str) -> Evidence:
    evidence = Evidence()
    for i, text in enumerate(texts):
        read_one(f"e{i}", io.BytesIO(text.encode()), evidence)
    return evidence


def test_the_request_carries_version_gpu_parallelism_flags_env_and_other_processes():
    log = (
        "INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.9.2\n"
        "vllm serve Qwen/Qwen3-30B-A3B --tensor-parallel-size 2 --data-parallel-size 2 "
        "--enable-expert-parallel "
        "--max-num-seqs 128 --some-future-flag 7\n"
        "export VLLM_ALL2ALL_BACKEND=deepep_high_throughput\n"
        "ValueError: Free memory on device cuda:0 (70.1/79.19 GiB) on startup is less than desired GPU "
        "memory "
        "utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
        "processes.\n"
    )
    request = plan_request(recover_setup(evidence_of(log)))
    assert request.vllm_version == "0.9.2" and request.gpu_memory == round(79.19 * GIB)
    assert request.flags == {
        "tensor_parallel_size": "2",
        "data_parallel_size": "2",
        "enable_expert_parallel": "true",
        "max_num_seqs": "128",
    }
    assert request.args.env == {"VLLM_ALL2ALL_BACKEND": "deepep_high_throughput"}
    assert request.used_by_other_processes == round((79.19 - 70.1) * GIB)


def test_the_plan_is_calibrated_to_reproduce_the_kv_memory_the_engine_logged():
    setup = recover_setup(evidence_of(STARTUP, SMI))
    assert setup.measured == {"weights": round(14.99 * GIB)}
    assert "activation" in calibrated(setup).measured
    ledger = plan_setup(setup)
    assert ledger is not None and not ledger.fits
    assert abs(ledger.budget - ledger.weights - ledger.activation - ledger.non_torch - 3.18) < 0.01
    assert "activation" in ledger.derived and "weights" in ledger.measured


def test_startup_fixes_put_the_engines_own_number_first_then_re_planned_ones(run_diagnose):
    _, result, _ = run_diagnose(STARTUP, SMI)
    assert top(result) == "max-model-len-exceeds-kv"
    fixes = result["causes"][0]["fixes"]
    assert fixes[0]["flags"] == {"max_model_len": "26048"}  # vLLM's own estimate, a whole number of blocks
    planned = [f for f in fixes if f["basis"] == "planner"]
    assert planned and all("re-planned: fits" in f["summary"] for f in planned)
    lengths = [int(f["flags"]["max_model_len"]) for f in planned if set(f["flags"]) == {"max_model_len"}]
    # The calibrated plan agrees with vLLM's estimate, less the margin its fixes keep (the nvidia-smi total's
    # band: CUDA reports up to 0.6% less than nvidia-smi's 24,564 MiB).
    assert lengths and all(26048 - 2048 <= n <= 26048 for n in lengths)


def test_where_the_memory_went_shows_the_ledger_with_each_terms_source(run_diagnose):
    _, result, _ = run_diagnose(STARTUP, SMI)
    memory = {m["item"]: m["value"] for m in result["memory"]}
    assert memory["weights"].startswith("14.99 GiB (logged")
    assert "from the logged KV" in memory["activation peak"]
    assert memory["planner's verdict for this setup"].startswith("does not fit")
