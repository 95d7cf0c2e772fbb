"""An engine's own sizing of the setup decides the cause where no error line does: ollama's estimate of a
model's parts against the GPUs' free memory. Texts are real, pasted as in the cited public threads."""

from __future__ import annotations

from tests.diagnosis.pasted import ranked, read

from oomguard.diagnosis.evidence import MemoryPlan
from oomguard.units import GiB, MiB

# https://github.com/ollama/ollama/issues/10417: mistral-small3.1 (vision) on one 24 GB GPU; the projector's
# graph on the largest image (8.8 GiB) is 20x the text graph; the estimate leaves 4 of 41 layers on the CPU.
PROJECTOR_GRAPH = """avril 30 00:04:08 jarvis-server ollama[1175]: time=2025-04-30T00:04:08.690Z level=INFO source=server.go:138 msg=offload
 library=cuda layers.requested=41 layers.model=41 layers.offload=37 layers.split="" memory.available="[23.3 GiB]"
 memory.gpu_overhead="0 B" memory.required.full="24.4 GiB" memory.required.partial="23.0 GiB" memory.required.kv="640.0 MiB"
 memory.required.allocations="[23.0 GiB]" memory.weights.total="13.1 GiB" memory.weights.repeating="12.7 GiB"
 memory.weights.nonrepeating="360.0 MiB" memory.graph.full="426.7 MiB" memory.graph.partial="426.7 MiB"
 projector.weights="769.3 MiB" projector.graph="8.8 GiB"
"""  # noqa: E501

# https://github.com/ollama/ollama/issues/6283: a community model inheriting a 128k context, with
# OLLAMA_NUM_PARALLEL=2: 31.2 GiB of the 35.3 GiB it needs is the KV cache.
KV_FOR_THE_CONTEXT = """time=2024-08-09T14:28:55.142+03:00 level=INFO source=memory.go:309 msg="offload to cuda" layers.requested=-1 layers.model=33 layers.offload=0 layers.split="" memory.available="[4.6 GiB]" memory.required.full="35.3 GiB" memory.required.partial="0 B" memory.required.kv="31.2 GiB" memory.required.allocations="[0 B]" memory.weights.total="34.9 GiB"
"""  # noqa: E501

# https://github.com/ollama/ollama/issues/9322: a 70B fp16 text model; the weights overflow the two GPUs and
# the host, neither KV nor a projector is large.
TEXT_MODEL_SPLIT = """Feb 24 15:36:32 adl ollama[2521]: time=2025-02-24T15:36:32.318-08:00 level=INFO source=memory.go:356 msg="offload to cuda" layers.requested=-1 layers.model=81 layers.offload=14 layers.split=7,7 memory.available="[14.5 GiB 15.2 GiB]" memory.gpu_overhead="0 B" memory.required.full="136.3 GiB" memory.required.partial="28.7 GiB" memory.required.kv="640.0 MiB" memory.required.allocations="[14.3 GiB 14.3 GiB]" memory.weights.total="128.1 GiB" memory.weights.repeating="126.2 GiB" memory.weights.nonrepeating="2.0 GiB" memory.graph.full="1.1 GiB" memory.graph.partial="1.1 GiB"
Feb 24 11:16:31 adl systemd[1]: ollama.service: A process of this unit has been killed by the OOM killer.
"""  # noqa: E501


def test_ollamas_estimate_is_read_across_the_lines_a_paste_wraps_it_over() -> None:
    [plan] = read(PROJECTOR_GRAPH).of(MemoryPlan)
    assert plan.available == (round(23.3 * GiB),)
    assert (plan.layers, plan.offloaded) == (41, 37)
    assert plan.projector == round(769.3 * MiB) + round(8.8 * GiB)
    assert plan.kv == 640 * MiB


def test_a_projector_taking_much_of_the_first_gpu_is_the_multimodal_encoders_reserve() -> None:
    assert ranked(PROJECTOR_GRAPH)[0] == "multimodal-encoder"


def test_a_kv_cache_that_is_most_of_the_estimate_is_the_context() -> None:
    assert ranked(KV_FOR_THE_CONTEXT)[0] == "max-model-len-exceeds-kv"


def test_a_text_models_estimate_names_neither_the_encoder_nor_the_context() -> None:
    causes = ranked(TEXT_MODEL_SPLIT)
    assert causes[0] == "host-ram-oom"
    assert "multimodal-encoder" not in causes[:3] and "max-model-len-exceeds-kv" not in causes[:3]


def test_a_projector_in_an_estimate_that_fits_is_no_cause() -> None:
    # The same vision model's estimate with every layer placed and the whole of it within the free memory.
    fits = PROJECTOR_GRAPH.replace("layers.offload=37", "layers.offload=41").replace(
        'memory.available="[23.3 GiB]"', 'memory.available="[47.5 GiB]"'
    )
    causes = ranked(fits + "Error: model runner has unexpectedly stopped\n")
    assert "multimodal-encoder" not in causes[:1]
