"""32-bit limits on sizes and offsets, as the checks of kernels and frameworks state them
(`int32-index-math`).

A tensor, a KV pool or one kernel's offset past 2^31 elements (or bytes) does not run out of memory: a check
refuses it, or the 32-bit product wraps and the kernel reads or writes elsewhere. The checks say so in their
own spellings, none of which a memory error carries:
- PyTorch (aten/src/ATen): "Expected canUse32BitIndexMath(input) && canUse32BitIndexMath(output) to be true";
  core/TensorBase.h "numel needs to be smaller than int32_t max; otherwise, please use packed_accessor64";
  native/cuda/Sort.cpp, TensorTopK.cpp, cub "... can not have more than INT_MAX elements"; Nonzero.cu
  "nonzero is not supported for tensors with more than INT_MAX elements";
- the sizes a wrapped product leaves (aten/src/ATen/EmptyTensor.cpp, c10/core/TensorImpl.h): "Trying to
  create tensor with negative dimension -1294967296: [-1294967296]" (a wrapped int32 is ~2^31 below zero; a
  small negative count, such as vLLM V0's KV block count from a negative memory budget, is not one);
- Triton's overflow sanitizer (python/triton/language/semantic.py, TRITON_DEBUG=1): "int32 overflow detected
  for operation mul";
- C++ asserts of kernels (aiter/Composable Kernel, FlashInfer, ggml, vLLM csrc): "KV cache K offset overflow:
  exceed int32 max", "std::numeric_limits<int32_t>::max()", "GGML_ASSERT(ggml_nbytes(src0) <= INT_MAX)";
- a fix quoted as a diff, whose added line widens an index or offset to 64 bits (`int64-widening`, weaker:
  the fix implies the overflow, it does not show it);
- c10's checked conversion (c10/util/TypeCast.h): "value cannot be converted to type int without overflow";
  NumPy 2's "OverflowError: Python integer 2147483648 out of bounds for int32";
- the limit by value in an assert or a kernel's arithmetic: "2**31", "2^31", "2^32" (PyTorch MPS: "total
  bytes of NDArray > 2**32").
An integer overflow of no stated width (Rust's "attempt to multiply with overflow", a 64-bit byte count) is
not read: it names no 32-bit limit.
"""

from __future__ import annotations

import re

from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import LineParser, Message
from oomguard.diagnosis.sources.triggers import Triggers

# Names and phrases of a 32-bit limit (identifiers as C/C++/Python write them, or the checks' own phrases).
_LIMIT = re.compile(
    r"\bcanUse32BitIndexMath\b|\bU?INT(?:32)?_MAX\b|\bint32_t max\b"
    r"|\bnumeric_limits<\s*(?:u?int(?:32_t)?|unsigned|index_t)\s*>\s*::\s*max\b"
    r"|\b(?:int32|32-bit) (?:overflow|max)\b|\bexceeds? (?:the )?int32\b|\boverflows? int32\b"
    r"|\b(?:integer|int) overflow\b"
    r"|\bvalue cannot be converted to type u?int(?:32_t)? without overflow\b"
    # NumPy 2 refusing a Python int for an int32 array ("Python integer 2147483648 out of bounds for int32")
    r"|\bout of bounds for u?int32\b"
    # the limit by value, as asserts and a kernel's arithmetic write it ("assert n < 2**31", "2^31 / 40960")
    r"|(?<![\w.])2(?:\^|\*\*| \*\* )3[12]\b|(?<![\w.])2\u00b3[\u00b9\u00b2]",
    re.IGNORECASE,
)
# The fix in a quoted diff: an added line that widens an index or offset to 64 bits ("+ ).to(tl.int64)",
# "+ int64_t offset = ...", "+ static_cast<int64_t>(idx)"): a PR that had 32-bit arithmetic overflow.
_WIDENED = re.compile(
    r"^\+(?![+-]).*(?:\.to\(tl\.int64\)|\btl\.int64\b|\bstatic_cast<\s*int64_t\s*>|\bint64_t\s+\w+\s*=|"
    r"\(int64_t\)|\.to\(torch\.int64\)|\.long\(\))"
)
# PyTorch refusing a negative size: the value the wrapped product left.
_NEGATIVE_DIMENSION = re.compile(r"\bnegative dimension (?P<n>-\d+)\b")
# A negative size this far below zero is a product that wrapped past 2^31, not a count that went negative
# (KV block counts, token budgets: thousands to millions).
WRAPPED_BELOW = -(1 << 24)


class Parser(LineParser):
    TRIGGERS = Triggers(
        words=(
            "canUse32BitIndexMath",
            "negative dimension",
            "int64",
            ".long()",
            *("2^31", "2^32", "2**31", "2**32", "2 ** 31", "2 ** 32", "2\u00b3\u00b9", "2\u00b3\u00b2"),
        ),
        caseless=("int_max", "int32", "numeric_limits<", "32-bit ", "overflow"),
    )

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        if _WIDENED.match(line.text):
            self.ctx.signal(line, body, "int64-widening")
            return
        m = _NEGATIVE_DIMENSION.search(body)
        if m and int(m.group("n")) <= WRAPPED_BELOW:
            self.ctx.signal(line, body, "int32-index-math", negative_size=float(m.group("n")))
        elif _LIMIT.search(body):
            self.ctx.signal(line, body, "int32-index-math")
