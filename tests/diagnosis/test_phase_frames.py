"""Where a stack places a failure, by what each frame was doing: umbrella functions place nothing, replaying
a captured graph is serving (not capture), capturing is capture."""

from __future__ import annotations

from oomguard.diagnosis.evidence import Frame, Where
from oomguard.diagnosis.rules import frame_category


def frame(path: str, func: str, code: str = "") -> Frame:
    return Frame(where=Where("log", 1), text="", path=path, lineno=1, function=func, code=code)


def test_enginecores_initialize_kv_caches_is_an_umbrella_not_kv_allocation():
    # https://github.com/vllm-project/vllm/issues/18730: core.py __init__ calls the umbrella, which runs the
    # profile, the KV allocation and graph capture in turn.
    umbrella = frame(
        "/home/llm/anaconda3/envs/vllm/lib/python3.12/site-packages/vllm/v1/engine/core.py",
        "__init__",
        "self._initialize_kv_caches(vllm_config)",
    )
    assert frame_category(umbrella) is None


def test_replaying_a_captured_graph_is_serving():
    f = frame(
        "/usr/local/lib/python3.12/dist-packages/vllm/compilation/cuda_graph.py",
        "__call__",
        "entry.cudagraph.replay()",
    )
    assert frame_category(f) == "serving"


def test_capturing_a_graph_is_capture():
    assert frame_category(frame("/x/vllm/v1/worker/gpu_model_runner.py", "capture_model")) == "cudagraph"
    assert (
        frame_category(frame("/x/torch/cuda/graphs.py", "__exit__", "self.cuda_graph.capture_end()"))
        == "cudagraph"
    )


# https://github.com/vllm-project/vllm/issues/9356: Mllama's patch embedding runs nn.Unfold over the image
# (torch/nn/modules/fold.py -> F.unfold -> im2col); no frame of the model's own file is in the paste.
def test_torchs_image_unfold_is_the_vision_encoder() -> None:
    fold = frame(
        "/model/anaconda3/envs/llm/lib/python3.11/site-packages/torch/nn/modules/fold.py",
        "forward",
        "return F.unfold(input, self.kernel_size, self.dilation,",
    )
    im2col = frame(
        "/model/anaconda3/envs/llm/lib/python3.11/site-packages/torch/nn/functional.py",
        "unfold",
        "return torch._C._nn.im2col(input, _pair(kernel_size), _pair(dilation), _pair(padding),",
    )
    assert frame_category(fold) == "encoder"
    assert frame_category(im2col) == "encoder"
    # A tensor's 1-D unfold (sliding windows over a sequence) in a text model is no image operation.
    windows = frame("/x/vllm/model_executor/models/llama.py", "forward", "chunks = x.unfold(1, 4, 4)")
    assert frame_category(windows) != "encoder"
