"""Where a stack places a failure, by what each frame was doing: umbrella functions place nothing, replaying
a captured graph is serving (not capture), capturing is capture."""

from __future__ import annotations

from tests.diagnosis.pasted import ranked, read

from oomguard.diagnosis.evidence import Frame, Where
from oomguard.diagnosis.rules import frame_category
from oomguard.diagnosis.sources.rust_backtrace import split_symbol


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


# https://github.com/m0at/rvllm/issues/38: a Rust engine's panic; its backtrace's frames name the step (the
# weights' HashMap cloned inside GpuWorker::load_weights).
RUST_PANIC = """thread 'main' panicked at cudarc-0.19.4/src/driver/safe/core.rs:837:26:
called `Result::unwrap()` on an `Err` value: DriverError(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")
stack backtrace:
   0: rust_begin_unwind
   1: core::panicking::panic_fmt
   2: core::result::unwrap_failed
   3: <hashbrown::raw::RawTable<T,A> as core::clone::Clone>::clone
   4: rvllm_worker::gpu_worker::GpuWorker::load_weights
   5: rvllm_engine::gpu_engine::inner::GpuLLMEngine::new
   6: rvllm::main::{{closure}}
"""


def test_a_rust_backtraces_frames_place_the_step() -> None:
    frames = read(RUST_PANIC).of(Frame)
    assert [f.function for f in frames][3:6] == ["clone", "load_weights", "new"]
    assert split_symbol("rvllm::main::{{closure}}") == ("rvllm", "main")
    assert ranked(RUST_PANIC)[0] == "weights-dont-fit"


def test_numbered_lines_outside_a_backtrace_are_no_frames() -> None:
    # the same numbered lines without Rust's header (a list in a report), and the header's frames ending at
    # the first line that is not one
    listed = RUST_PANIC.replace("stack backtrace:\n", "")
    assert not read(listed).of(Frame)
    ended = RUST_PANIC.replace("   5: rvllm_engine", "the engine then exits\n   5: rvllm_engine")
    assert [f.function for f in read(ended).of(Frame)][-1] == "load_weights"
