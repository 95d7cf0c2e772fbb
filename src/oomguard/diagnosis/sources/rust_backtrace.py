"""A Rust panic's backtrace (RUST_BACKTRACE=1): the native frames of engines and tools written in Rust (TGI's
router, mistral.rs, candle, rvllm, tokenizers), read as stack frames so their function names place the step
as a Python traceback's do (`load_weights` is the weights, `profile_run` the profile run).

Format (Rust's std::backtrace, library/std/src/backtrace.rs and sys/backtrace.rs), after a header line:
    stack backtrace:
       0: rust_begin_unwind
       4: rvllm_worker::gpu_worker::GpuWorker::load_weights
                 at ./crates/rvllm-worker/src/gpu_worker.rs:212:9
      12: 0x55d5c8a1b2c3 - tokenizers::tokenizer::TokenizerImpl::encode
The innermost frame comes first (the panic's machinery, then the call that failed); a frame is
`module::path::function` (`<Type as Trait>::method`, `{{closure}}` and a `::h<hash>` suffix aside), its file
on the `at` line under it. The frames end where a line is neither.
"""

from __future__ import annotations

import re

from oomguard.diagnosis.evidence import Frame
from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import Context, LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers

_HEADER = "stack backtrace:"
_FRAME = re.compile(r"^\s*\d+:\s+(?:0x[0-9a-f]+ - )?(?P<symbol>[<\w].*?)\s*$")
_AT = re.compile(r"^\s*at (?P<path>\S+?):(?P<no>\d+)(?::\d+)?\s*$")
# What a symbol carries besides its path: a closure's marker, the mangling hash.
_NOISE = re.compile(r"::\{\{closure\}\}|::h[0-9a-f]{16}$")


def split_symbol(symbol: str) -> tuple[str, str]:
    """(module path as a file-like path, function) of a Rust symbol: `a::b::Type::f` -> ('a/b/Type', 'f')."""
    name = _NOISE.sub("", symbol)
    module, _, function = name.rpartition("::")
    return module.replace("::", "/"), function or name


class Parser(LineParser):
    # Only the header is a trigger; the frames under it are read while they last (busy()).
    TRIGGERS = Triggers(words=(_HEADER,))

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.inside = False

    def busy(self) -> bool:
        return self.inside

    def feed(self, line: Line, msg: Message) -> None:
        text = line.text
        if _HEADER in text:
            self.inside = True
            return
        if not self.inside:
            return
        if _AT.match(text):
            return  # the file of the frame above: its name already placed it
        m = _FRAME.match(text)
        if m is None:
            self.inside = False  # the backtrace ended
            return
        path, function = split_symbol(m.group("symbol"))
        self.ctx.emit(
            Frame(
                where=self.ctx.where(line),
                text=self.ctx.clip(text),
                path=path,
                lineno=0,
                function=function,
            )
        )
