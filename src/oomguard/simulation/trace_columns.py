"""A trace's requests held as columns: bytes per row, not Python objects per row.

A 10M-row trace read into `TraceRequest` objects costs about 550 bytes a row (5.5 GB); as typed arrays it
costs 24 bytes a row (arrival, prompt and output tokens), plus 8 bytes per prefix id and the request ids'
UTF-8 text when the trace has them. `RequestColumns` is a `Sequence[TraceRequest]`: a row becomes a
`TraceRequest` only when it is read, so the replay turns each request into its scheduling state as it
arrives.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import overload


@dataclass(frozen=True)
class TraceRequest:
    rid: str
    arrival: float  # seconds from the start, or an engine step index when the workload's clock is "steps"
    prompt_tokens: int
    output_tokens: int
    prefix_ids: tuple[int, ...] = ()


# Request ids nobody gave: the row's position, as the readers always named them.
DEFAULT_RID_PREFIX = "r"


class RequestColumns(Sequence[TraceRequest]):
    """Requests in arrival columns. Prefix ids are one flat column cut by per-row ends (absent while no
    row has any); request ids are one UTF-8 text cut the same way (absent while every id is the default
    `r<row>`). Ids that do not fit 64 bits (a hash printed whole) move the id column to a plain list."""

    __slots__ = (
        "_id_ends",
        "_ids",
        "_rid_ends",
        "_rid_offset",
        "_rid_text",
        "arrivals",
        "outputs",
        "prompts",
    )

    def __init__(self) -> None:
        self.arrivals = array("d")
        self.prompts = array("q")
        self.outputs = array("q")
        self._ids: array[int] | list[int] = array("q")
        self._id_ends: array[int] | None = None
        self._rid_text: bytearray | None = None
        self._rid_ends: array[int] | None = None
        self._rid_offset = 0  # default ids count from here (a window keeps its rows' names)

    @classmethod
    def of(cls, requests: Iterable[TraceRequest]) -> RequestColumns:
        """`requests` as columns (itself when it already is)."""
        if isinstance(requests, RequestColumns):
            return requests
        columns = cls()
        for r in requests:
            columns.append(r.arrival, r.prompt_tokens, r.output_tokens, r.prefix_ids, r.rid)
        return columns

    # ----- building -------------------------------------------------------------------------------------

    def append(
        self,
        arrival: float,
        prompt_tokens: int,
        output_tokens: int,
        prefix_ids: Sequence[int],
        rid: str | None,
    ) -> None:
        """One row; `rid` None names it `r<row>`. Raises OverflowError (nothing appended) for a token count
        beyond 64 bits."""
        row = len(self.arrivals)
        self.prompts.append(prompt_tokens)
        try:
            self.outputs.append(output_tokens)
        except OverflowError:
            self.prompts.pop()
            raise
        self.arrivals.append(arrival)
        if prefix_ids or self._id_ends is not None:
            self._append_ids(row, prefix_ids)
        if self._rid_ends is not None or (rid is not None and rid != self._default_rid(row)):
            self._append_rid(row, self._default_rid(row) if rid is None else rid)

    def _append_ids(self, row: int, prefix_ids: Sequence[int]) -> None:
        if self._id_ends is None:
            self._id_ends = array("q", bytes(8 * row))  # the rows before had none
        try:
            self._ids.extend(prefix_ids)
        except OverflowError:
            self._ids = list(self._ids)  # array.extend appended the ids before the one that overflowed
            del self._ids[self._id_ends[-1] if self._id_ends else 0 :]
            self._ids.extend(prefix_ids)
        self._id_ends.append(len(self._ids))

    def _append_rid(self, row: int, rid: str) -> None:
        if self._rid_ends is None or self._rid_text is None:
            self._rid_text = bytearray()
            self._rid_ends = array("q")
            for earlier in range(row):
                self._rid_text += self._default_rid(earlier).encode()
                self._rid_ends.append(len(self._rid_text))
        self._rid_text += rid.encode("utf-8", "surrogatepass")
        self._rid_ends.append(len(self._rid_text))

    def take(self, rows: Sequence[int]) -> RequestColumns:
        """These rows, in this order, each keeping its request id (a `range` of step 1 is sliced)."""
        out = RequestColumns()
        run = isinstance(rows, range) and rows.step == 1
        if isinstance(rows, range) and rows.step == 1:
            out.arrivals = self.arrivals[rows.start : rows.stop]
            out.prompts = self.prompts[rows.start : rows.stop]
            out.outputs = self.outputs[rows.start : rows.stop]
        else:
            out.arrivals = array("d", [self.arrivals[i] for i in rows])
            out.prompts = array("q", [self.prompts[i] for i in rows])
            out.outputs = array("q", [self.outputs[i] for i in rows])
        if self._id_ends is not None:
            for k, i in enumerate(rows):
                out._append_ids(k, self.prefix_ids(i))
        if self._rid_ends is None and run:
            out._rid_offset = self._rid_offset + (rows[0] if rows else 0)
        else:
            for k, i in enumerate(rows):
                out._append_rid(k, self.rid(i))
        return out

    def with_arrivals(self, arrivals: Iterable[float]) -> RequestColumns:
        """The same rows at other arrival times (the other columns shared, not copied)."""
        out = RequestColumns()
        out.arrivals = array("d", arrivals)
        if len(out.arrivals) != len(self.arrivals):
            raise ValueError("one arrival per row")
        out.prompts, out.outputs = self.prompts, self.outputs
        out._ids, out._id_ends = self._ids, self._id_ends
        out._rid_text, out._rid_ends, out._rid_offset = self._rid_text, self._rid_ends, self._rid_offset
        return out

    def _default_rid(self, row: int) -> str:
        return f"{DEFAULT_RID_PREFIX}{row + self._rid_offset}"

    # ----- reading --------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.arrivals)

    @overload
    def __getitem__(self, index: int) -> TraceRequest: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[TraceRequest, ...]: ...

    def __getitem__(self, index: int | slice) -> TraceRequest | tuple[TraceRequest, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("request index out of range")
        return TraceRequest(
            self.rid(index),
            self.arrivals[index],
            self.prompts[index],
            self.outputs[index],
            self.prefix_ids(index),
        )

    def __eq__(self, other: object) -> bool:
        """Row by row, as tuples of requests compare."""
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]  # columns grow: not a key

    def __iter__(self) -> Iterator[TraceRequest]:
        for i in range(len(self)):
            yield self[i]

    @property
    def plain(self) -> bool:
        """No row has prefix ids or a request id of its own: a row is its three array entries."""
        return self._id_ends is None and self._rid_ends is None

    @property
    def num_prefix_ids(self) -> int:
        return len(self._ids)

    @property
    def nbytes(self) -> int:
        """The columns' size (what the arrays hold, not their spare capacity)."""
        cut = len(self._id_ends or ()) + len(self._rid_ends or ())
        return 24 * len(self) + 8 * (len(self._ids) + cut) + len(self._rid_text or b"")

    def rid(self, row: int) -> str:
        if self._rid_ends is None or self._rid_text is None:
            return self._default_rid(row)
        start = self._rid_ends[row - 1] if row else 0
        return self._rid_text[start : self._rid_ends[row]].decode("utf-8", "surrogatepass")

    def prefix_ids(self, row: int) -> tuple[int, ...]:
        if self._id_ends is None:
            return ()
        start = self._id_ends[row - 1] if row else 0
        return tuple(self._ids[start : self._id_ends[row]])
