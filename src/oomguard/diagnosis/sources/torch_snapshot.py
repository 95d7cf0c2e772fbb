"""PyTorch CUDA memory snapshots (`torch.cuda.memory._snapshot()` dumped with pickle), read without running
anything.

A snapshot is plain data (dicts, lists, strings, numbers), so this reader is a minimal pickle *opcode
interpreter* over `pickletools.genops` that knows only the opcodes building plain containers and scalars.
Every opcode that could import or call (GLOBAL, STACK_GLOBAL, INST, OBJ, REDUCE, BUILD, NEWOBJ, NEWOBJ_EX,
EXT1/2/4, PERSID, BINPERSID) is refused: the pickle is rejected with one line naming the opcode. Nothing is
ever imported, called or constructed, whatever the file says.
"""

from __future__ import annotations

import io
import math
import pickletools
from collections import defaultdict
from typing import Any

from oomguard.diagnosis.evidence import Evidence, Snapshot, Where
from oomguard.errors import shown

# Opcodes that push a scalar argument as is.
_SCALARS = {
    "INT",
    "BININT",
    "BININT1",
    "BININT2",
    "LONG",
    "LONG1",
    "LONG4",
    "FLOAT",
    "BINFLOAT",
    "STRING",
    "BINSTRING",
    "SHORT_BINSTRING",
    "UNICODE",
    "SHORT_BINUNICODE",
    "BINUNICODE",
    "BINUNICODE8",
    "BINBYTES",
    "SHORT_BINBYTES",
    "BINBYTES8",
    "BYTEARRAY8",
}
_REFUSED = {
    "GLOBAL",
    "STACK_GLOBAL",
    "INST",
    "OBJ",
    "REDUCE",
    "BUILD",
    "NEWOBJ",
    "NEWOBJ_EX",
    "EXT1",
    "EXT2",
    "EXT4",
    "PERSID",
    "BINPERSID",
    "NEXT_BUFFER",
    "READONLY_BUFFER",
}
# Bound on the opcodes read (a snapshot of a busy 8-GPU node is a few million).
MAX_OPCODES = 50_000_000
# A size past this (1 PiB) is no GPU's: a snapshot field with it is not one torch wrote.
MAX_BYTES = 1 << 50


class RefusedPickle(ValueError):
    """The pickle asks to import or call something, or is not a well-formed plain-data pickle."""


class _Mark:
    pass


_MARK = _Mark()


def _memo_index(arg: object) -> int:
    """The memo slot of PUT/GET opcodes (pickletools gives it as an int; genops gives str for text PUT)."""
    if isinstance(arg, int):
        return arg
    if isinstance(arg, str) and arg.isdigit():
        return int(arg)
    raise RefusedPickle("malformed memo index")


def load_plain(data: bytes) -> Any:
    """Build the object a plain-data pickle describes; raise RefusedPickle for anything else."""
    stack: list[Any] = []
    memo: dict[int, Any] = {}

    def pop_mark() -> list[Any]:
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is _MARK:
                items = stack[i + 1 :]
                del stack[i:]
                return items
        raise RefusedPickle("MARK expected")

    try:
        for count, (op, arg, pos) in enumerate(pickletools.genops(io.BytesIO(data))):
            name = op.name
            if count > MAX_OPCODES:
                raise RefusedPickle("too many opcodes")
            if name in _REFUSED:
                what = f" {arg}" if isinstance(arg, str) else ""
                raise RefusedPickle(
                    f"refused opcode {name}{what} at byte {pos}: snapshots hold plain data only"
                )
            if name in ("PROTO", "FRAME"):
                continue
            if name == "STOP":
                if len(stack) != 1:
                    raise RefusedPickle("malformed pickle (stack at STOP)")
                return stack[0]
            if name in _SCALARS:
                stack.append(arg)
            elif name == "NONE":
                stack.append(None)
            elif name in ("NEWTRUE", "NEWFALSE"):
                stack.append(name == "NEWTRUE")
            elif name == "MARK":
                stack.append(_MARK)
            elif name == "EMPTY_DICT":
                stack.append({})
            elif name == "EMPTY_LIST":
                stack.append([])
            elif name == "EMPTY_TUPLE":
                stack.append(())
            elif name == "EMPTY_SET":
                stack.append(set())
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(name[-1])
                items = stack[-n:]
                del stack[-n:]
                stack.append(tuple(items))
            elif name == "TUPLE":
                stack.append(tuple(pop_mark()))
            elif name == "LIST":
                stack.append(pop_mark())
            elif name == "DICT":
                items = pop_mark()
                stack.append(dict(zip(items[::2], items[1::2])))
            elif name == "FROZENSET":
                stack.append(frozenset(pop_mark()))
            elif name == "APPEND":
                value = stack.pop()
                stack[-1].append(value)
            elif name == "APPENDS":
                items = pop_mark()
                stack[-1].extend(items)
            elif name == "SETITEM":
                value, key = stack.pop(), stack.pop()
                stack[-1][key] = value
            elif name == "SETITEMS":
                items = pop_mark()
                target = stack[-1]
                for k, v in zip(items[::2], items[1::2]):
                    target[k] = v
            elif name == "ADDITEMS":
                items = pop_mark()
                stack[-1].update(items)
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[_memo_index(arg)] = stack[-1]
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                stack.append(memo[_memo_index(arg)])
            elif name == "POP":
                stack.pop()
            elif name == "POP_MARK":
                pop_mark()
            elif name == "DUP":
                stack.append(stack[-1])
            else:
                raise RefusedPickle(f"unsupported opcode {name} at byte {pos}")
    except RefusedPickle:
        raise
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, EOFError) as err:
        raise RefusedPickle(f"truncated or malformed pickle ({type(err).__name__}: {err})") from None
    raise RefusedPickle("truncated pickle (no STOP)")


def _site(frames: Any) -> str:
    """The first frame outside torch itself: where the allocation was asked for."""
    if not isinstance(frames, list):
        return "?"
    for f in frames:
        if isinstance(f, dict):
            filename = str(f.get("filename", ""))
            if "/torch/" in filename or filename.startswith("??") or not filename:
                continue
            return f"{filename}:{f.get('line', '?')} {f.get('name', '')}".strip()
    return "?"


def _size(container: dict[Any, Any], key: str) -> int:
    """A byte count of the snapshot (an int, or a whole finite float); RefusedPickle naming the field else."""
    value = container.get(key, 0)
    if value is None:
        return 0
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < MAX_BYTES:
        raise RefusedPickle(f"not a torch memory snapshot ({key!r} is {shown(value)}, not a size in bytes)")
    return value


def _items(container: dict[Any, Any], key: str) -> list[Any]:
    """A list field of the snapshot (absent or None: empty); RefusedPickle naming the field else."""
    value = container.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise RefusedPickle(f"not a torch memory snapshot ({key!r} is {type(value).__name__}, not a list)")
    return value


def _once(items: list[Any], seen: set[int]) -> list[Any]:
    """The dicts of `items` not met before. torch writes each segment, block and trace entry once; a pickle
    can make many refer to one (memo GETs: N segments sharing one list of N blocks is N^2 blocks from a
    file of N), and the memory one object describes exists once, so it is counted once."""
    out = []
    for item in items:
        if isinstance(item, dict) and id(item) not in seen:
            seen.add(id(item))
            out.append(item)
    return out


def summarize(snapshot: Any, name: str) -> Snapshot:
    """Reserved vs allocated, the largest free block, the failed request, the top allocation sites."""
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("segments"), list):
        raise RefusedPickle("not a torch memory snapshot (no 'segments' list)")
    reserved = allocated = largest_free = 0
    sites: dict[str, int] = defaultdict(int)
    site_of: dict[int, str] = {}  # frames lists shared by many blocks are walked once
    seen: set[int] = set()
    segments = _once(snapshot["segments"], seen)
    for seg in segments:
        reserved += _size(seg, "total_size")
        for block in _once(_items(seg, "blocks"), seen):
            size = _size(block, "size")
            state = str(block.get("state", ""))
            if state == "active_allocated":
                allocated += size
                frames = block.get("frames")
                if id(frames) not in site_of:
                    site_of[id(frames)] = _site(frames)
                sites[site_of[id(frames)]] += size
            elif state == "inactive":
                largest_free = max(largest_free, size)
    failed: int | None = None
    for trace in _items(snapshot, "device_traces"):
        for entry in _once(trace, seen) if isinstance(trace, list) else []:
            if entry.get("action") == "oom":
                failed = _size(entry, "size")
    top = tuple(sorted(sites.items(), key=lambda kv: -kv[1])[:5])
    return Snapshot(
        where=Where(name, 1),
        text=f"torch memory snapshot, {len(segments)} segments",
        reserved=reserved,
        allocated=allocated,
        largest_free_block=largest_free,
        segments=len(segments),
        top_sites=top,
        failed_request=failed,
    )


def read_document(name: str, data: bytes, evidence: Evidence) -> int:
    """Raises RefusedPickle (the caller reports it and goes on)."""
    summary = summarize(load_plain(data), name)
    evidence.add(summary)
    return 1
