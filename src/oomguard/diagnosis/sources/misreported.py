"""A wrapper that guesses memory over an error that is not one (`misreported-oom`).

Engines and their plugins catch any exception of a step that usually fails for memory and re-raise it with a
guess: vllm-openvino's profile run "RuntimeError: The error occurred during profile run. This might be due to
insufficient GPU memory.", ollama's "model failed to load, this may be due to resource limitations or an
internal error". The guess is no evidence: when the exception under it is one no allocation raises (a
KeyError, a TypeError, an ImportError: Python's own types for a missing key, a wrong call, a missing
module) and the document has no allocator out-of-memory text, the failure is that exception, not memory.
(AttributeError is left out: "'NoneType' object has no attribute ..." is how an engine's allocator that
returned None for a full pool surfaces.)
"""

from __future__ import annotations

import re

from oomguard.diagnosis.evidence import Signal
from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import Context, LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers

_HEDGE = re.compile(
    r"\b(?:might|may|could) be (?:due to|caused by|because of) (?:insufficient|not enough|a lack of) "
    r"(?:GPU |device |CUDA |VRAM )?memory\b"
    r"|\bmay be due to resource limitations\b",
    re.IGNORECASE,
)
# Python's exceptions that no allocation failure raises, as an exception line starts.
_NOT_MEMORY = re.compile(
    r"^(?:\[rank\d+\]:\s*)?(?:[\w.]+\.)?(?P<name>KeyError|TypeError|NameError|ImportError|ModuleNotFoundError"
    r"|NotImplementedError|FileNotFoundError|UnicodeDecodeError|JSONDecodeError|SyntaxError)\b:"
)
_OUT_OF_MEMORY = re.compile(
    r"out of memory|OutOfMemory|Tried to allocate|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY"
    r"|hipErrorOutOfMemory",
    re.IGNORECASE,
)


class Parser(LineParser):
    TRIGGERS = Triggers(
        words=(
            "KeyError",
            "TypeError",
            "NameError",
            "ImportError",
            "ModuleNotFoundError",
            "NotImplementedError",
            "FileNotFoundError",
            "UnicodeDecodeError",
            "JSONDecodeError",
            "SyntaxError",
            "OutOfMemory",
            "Tried to allocate",
            "cudaErrorMemoryAllocation",
            "CUDA_ERROR_OUT_OF_MEMORY",
            "hipErrorOutOfMemory",
        ),
        caseless=("be due to", "be caused by", "be because of", "out of memory"),
    )

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.hedge: tuple[Line, str] | None = None
        self.raised: tuple[Line, str] | None = None
        self.out_of_memory = False

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        if _OUT_OF_MEMORY.search(body):
            self.out_of_memory = True
        if self.hedge is None and _HEDGE.search(body):
            self.hedge = (line, body)
        if self.raised is None and _NOT_MEMORY.match(body.strip()):
            self.raised = (line, body)

    def finish(self) -> None:
        if self.hedge is None or self.raised is None or self.out_of_memory:
            return
        line, body = self.raised
        self.ctx.emit(
            Signal(where=self.ctx.where_no(line.no), text=self.ctx.clip(body), name="misreported-oom")
        )
