"""What a reporter changed and whether it helped (issue 8: a cure that worked names its mechanism). Texts are
real, as written in the cited public threads."""

from __future__ import annotations

from tests.diagnosis.pasted import read

from oomguard.diagnosis.diagnosis import diagnose
from oomguard.diagnosis.evidence import LeverTried, TriedLever
from oomguard.diagnosis.sources.levers_tried import levers_tried

# https://github.com/runpod-workers/worker-vllm/issues/68 (Llama 3 70B in bf16 on a 40 GB GPU)
SWITCHED_TO_AWQ = """Runpod serverless vLLM with Llama 3 70B on 40GB GPU

No environment variables set apart from the model which was meta-llama/Meta-Llama-3-70B. I've since switched to a quantized version someone else made casperhansen/llama-3-70b-instruct-awq which works for me so this can be closed if you want."""  # noqa: E501

# https://github.com/huggingface/text-generation-inference/issues/734 (Llama 2 70B fp16 on 2 x A100)
TGI_QUANTIZED = """I can load this in transformers using device='auto' but when I try loading in tgi even with tiny max_total_tokens and max_batch_prefill_tokens I get cuda OOM. Nothing else using GPU memory. Is this configuration possible?

loading with quantization works but I would prefer 16bit"""  # noqa: E501

# https://github.com/ikawrakow/ik_llama.cpp/issues/731
SHORTER_CONTEXT_FITS = "this will lead to hang when sending a request, but -c 30000 fits and has no issues."
# https://github.com/vllm-project/vllm/issues/28230
EAGER_DID_NOT_HELP = (
    'As described in other posts, removing mm_encoder_tp_mode="data" or --enforce-eager does not work either.'
)
# https://github.com/vllm-project/vllm/issues/2413: the model's name carries GPTQ; nothing was changed.
MODEL_NAMED_GPTQ = (
    "The model downloaded from https://huggingface.co/TheBloke/Mixtral-8x7B-Instruct-v0.1-GPTQ and it works "
    "well in vllm 0.2.6 but run out of memory using 0.2.7."
)
# Advice, not an outcome (https://github.com/sgl-project/sglang/issues/6027).
ADVICE = "If it still OOMs, try to add `--max-prefill 4096` or `--mem-fraction-static 0.83`"


def test_a_change_said_to_work_is_read_with_its_lever() -> None:
    assert levers_tried(SHORTER_CONTEXT_FITS) == [(TriedLever.SHORTER_CONTEXT, True)]
    assert levers_tried("Setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True fixed it for me.") == [
        (TriedLever.EXPANDABLE_SEGMENTS, True)
    ]
    assert levers_tried("With --kv-cache-dtype fp8 it works.") == [(TriedLever.QUANTIZED_KV, True)]
    assert levers_tried("I increased gpu_memory_utilization to 0.95 and now it works.") == [
        (TriedLever.LARGER_KV_SHARE, True)
    ]


def test_a_change_said_not_to_help_counts_against_its_mechanism() -> None:
    assert levers_tried(EAGER_DID_NOT_HELP) == [(TriedLever.NO_CUDA_GRAPHS, False)]
    assert levers_tried("OOM even with --enforce-eager and max_num_seqs 1.") == [
        (TriedLever.NO_CUDA_GRAPHS, False)
    ]


def test_advice_questions_and_model_names_are_no_outcome() -> None:
    assert levers_tried(ADVICE) == []
    assert levers_tried("Does --enforce-eager help?") == []
    assert levers_tried(MODEL_NAMED_GPTQ) == []
    # Lowering the engine's share is no lever the reader maps (it frees room for several mechanisms).
    assert levers_tried("I lowered gpu_memory_utilization to 0.45 and made it work.") == []


def test_switching_to_quantized_weights_that_worked_names_the_weights() -> None:
    for text in (SWITCHED_TO_AWQ, TGI_QUANTIZED):
        evidence = read(text)
        assert [(f.lever, f.helped) for f in evidence.of(LeverTried)] == [
            (TriedLever.QUANTIZED_WEIGHTS, True)
        ]
        assert diagnose(evidence).causes[0].cls == "weights-dont-fit"


def test_a_lever_in_a_log_line_is_no_reporters_outcome() -> None:
    log = (
        "INFO 05-02 10:00:01 [config.py:1800] Using max model len 32768; enforce_eager=True works around the "
        "capture failure"
    )
    assert not read(log).of(LeverTried)


# https://github.com/vllm-project/vllm/issues/3285 (Mixtral fp16 on 4 x RTX 4090), as the reporter wrote it.
NOTHING_HELPS = """Hi! TP 4, model len 1000, enforce eager, multiple gpu utilizations; Nothing helps. I am testing on a 4x 4090 rig and I always get an OOM error, no matter what I try.

Same for the TheBlokes AWQ quantized model... Although, there with enforce-eager it works with a model len of 1000, but with 4x 24GB I should be able to even run the fp16 version with eager, but I recieve an OOM"""  # noqa: E501


def test_a_fix_the_reporter_says_did_not_help_moves_under_does_not_help() -> None:
    """ "TP 4 ... Nothing helps": splitting over more GPUs is not advised again; it is listed under 'does not
    help' with the reporter's sentence, and no cause both advises and rules out the same option."""
    causes = diagnose(read(NOTHING_HELPS)).causes
    weights = next(c for c in causes if c.cls == "weights-dont-fit")
    assert not any(
        "--tensor-parallel-size" in f.summary or "tensor_parallel_size" in f.flags for f in weights.fixes
    )
    assert any("more GPUs did not help" in n and "Nothing helps" in n for n in weights.not_helpful)
    for cause in causes:
        advised = {k for f in cause.fixes for k in f.flags}
        assert not any(
            k.replace("_", "-") in n for k in advised for n in cause.not_helpful if "the report says" in n
        )
    # Without the reporter's sentence the same cause still advises more GPUs.
    plain = diagnose(read(NOTHING_HELPS.replace("Nothing helps.", "It fails."))).causes
    assert any(
        "--tensor-parallel-size" in f.summary for c in plain if c.cls == "weights-dont-fit" for f in c.fixes
    )


def test_every_engines_spelling_of_a_lever_is_read() -> None:
    """The reader takes its option names from the same table the fixes are spelled from (engine_levers), so
    an engine's own option for a lever is heard as that lever."""
    from oomguard.diagnosis.engine_levers import SPELLINGS, TRIED_LEVERS

    for lever, row in TRIED_LEVERS.items():
        for spellings in SPELLINGS.values():
            if row in spellings:
                key = spellings[row].key
                assert (lever, True) in levers_tried(f"Setting {key} fixed it."), (lever, key)
