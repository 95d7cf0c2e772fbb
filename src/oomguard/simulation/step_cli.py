"""`oomguard step`: the memory of one batch shape, packed versus padded.

    oomguard step --hidden-size 10240 --dtype bfloat16 --scheduled 31344,1352,4,8,9,10,20,18,1d,1d

A number is a prefill chunk of that many tokens, `Nd` a decode row (N rows of one token; `1d` is one decode).
`--scheduled` also takes a pasted vLLM scheduler line or a `num_scheduled_tokens={'req-1': 31344, ...}` dict:
a row of 1 token is then taken as a decode. `--model` plans the model (`--gpu`, TP/DP/EP flags) and takes
the planner's activation costs and its headroom; widths given as flags override the model's. `--free` is the
memory the step may use, for an OOM verdict.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, replace
from typing import NoReturn

from oomguard.errors import ConfigError
from oomguard.hardware import DEFAULT_GPU
from oomguard.simulation.step_memory import (
    DEFAULT_SAMPLER_COPIES,
    DEFAULT_TENSORS_ALIVE,
    INT32_INDEX_LIMIT,
    ActivationModel,
    ModelWidths,
    Row,
    StepMemoryOptions,
    StepShape,
    step_memory,
)
from oomguard.units import format_gib, parse_bytes

DTYPE_BYTES = {
    "bfloat16": 2.0,
    "bf16": 2.0,
    "float16": 2.0,
    "fp16": 2.0,
    "half": 2.0,
    "float32": 4.0,
    "fp32": 4.0,
    "float": 4.0,
    "fp8": 1.0,
    "float8": 1.0,
}
_DICT = re.compile(r"num_scheduled_tokens\s*[=:]\s*(\{[^}]*\})")
_PAIR = re.compile(r"""['"]?([\w.:\-]+)['"]?\s*:\s*(\d+)""")


def dtype_bytes(name: str) -> float:
    try:
        return DTYPE_BYTES[name.lower()]
    except KeyError:
        raise ConfigError(f"unknown dtype {name!r} (bfloat16, float16, float32, fp8)") from None


def parse_scheduled(text: str) -> StepShape:
    """'31344,1352,4,1d,1d' or '3d', a `num_scheduled_tokens={...}` dict, or a whole pasted log line."""
    text = text.strip()
    match = _DICT.search(text)
    if match or text.startswith("{"):
        body = match.group(1) if match else text
        pairs = _PAIR.findall(body)
        if not pairs:
            raise ConfigError(f"no request: token pairs in {body[:80]!r}")
        return StepShape(tuple(Row(int(n), decode=int(n) == 1) for _, n in pairs if int(n) > 0))
    rows: list[Row] = []
    for item in re.split(r"[,\s]+", text):
        if not item:
            continue
        m = re.fullmatch(r"(\d+)(d?)", item.lower())
        if not m:
            raise ConfigError(
                f"bad --scheduled entry {item!r}: use a prefill chunk (4096) or decodes (1d, 3d)"
            )
        n = int(m.group(1))
        if n < 1:
            raise ConfigError(f"bad --scheduled entry {item!r}: must be >= 1")
        if m.group(2):
            if n > MAX_DECODE_ROWS:
                raise ConfigError(
                    f"bad --scheduled entry {item!r}: at most {MAX_DECODE_ROWS:,} decodes in one step"
                )
            rows.extend(Row(1, decode=True) for _ in range(n))
        else:
            rows.append(Row(n))
    if not rows:
        raise ConfigError("--scheduled is empty")
    return StepShape(tuple(rows))


# One decode row per running request: vLLM's max_num_seqs is at most a few thousand; this bound only stops a
# typo ('99999999999d') from building rows until memory runs out.
MAX_DECODE_ROWS = 1_000_000


def positive_int(text: str) -> int:
    """argparse type for widths and counts: a whole number >= 1 (a negative width has no memory)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return value


def count(text: str) -> int:
    """argparse type for counts that may be zero (experts of a dense model)."""
    return 0 if text.strip() == "0" else positive_int(text)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)  # one line and exit 2


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="oomguard step", description=(__doc__ or "").split("\n")[0])
    p.add_argument(
        "--scheduled", required=True, help="31344,1352,4,1d,1d | a pasted num_scheduled_tokens={...} line"
    )
    p.add_argument(
        "--model", help="model id or directory: the planner's activation costs and headroom for it"
    )
    p.add_argument("--gpu", help="GPU for --model's plan (default H100): sets the default --free")
    p.add_argument(
        "--hidden-size",
        type=positive_int,
        help="width of the padded layer's tensors (the padded mixed-length prefill OOM: 10240)",
    )
    p.add_argument("--intermediate-size", type=positive_int, help="MLP width (the expert's, for MoE)")
    p.add_argument("--vocab-size", type=positive_int)
    p.add_argument("--dtype", default=None, help="activation dtype (default: the model's, else bfloat16)")
    p.add_argument("--tensor-parallel-size", "-tp", type=positive_int, default=1)
    p.add_argument("--data-parallel-size", "-dp", type=positive_int, default=1)
    p.add_argument(
        "--enable-expert-parallel",
        "-ep",
        action="store_true",
        help="MoE experts spread over TP x DP ranks (each rank gathers every DP rank's tokens)",
    )
    p.add_argument("--num-experts", type=count, default=0)
    p.add_argument("--experts-per-token", type=count, default=0)
    p.add_argument(
        "--tensors-alive",
        type=positive_int,
        default=DEFAULT_TENSORS_ALIVE,
        help=f"intermediates alive at once in the padded layer (default {DEFAULT_TENSORS_ALIVE}, "
        "a padded mixed-length prefill's packed -> transposed copy -> conv/silu output)",
    )
    p.add_argument(
        "--sampler-copies",
        type=float,
        default=DEFAULT_SAMPLER_COPIES,
        help="fp32 logits copies alive in the sampler (with --model: the engine version's)",
    )
    p.add_argument(
        "--free", help="memory the step may use (e.g. 11.8GiB); default with --model: the planner's headroom"
    )
    p.add_argument("--json", action="store_true")
    return p


def width_flags(args: argparse.Namespace) -> dict[str, int]:
    """The model widths given as flags (--hidden-size, --intermediate-size, --vocab-size), those set: they
    override the model's (`oomguard step` and `oomguard simulate` take the same three)."""
    return {
        name: value
        for name, value in (
            ("hidden_size", args.hidden_size),
            ("intermediate_size", args.intermediate_size),
            ("vocab_size", args.vocab_size),
        )
        if value
    }


def _activation(args: argparse.Namespace) -> tuple[ActivationModel, int | None]:
    """The step's activation costs and, with --model, the planner's headroom for them."""
    flags = width_flags(args)
    if args.model:
        from oomguard.planning import PlanRequest, plan
        from oomguard.simulation.model_facts import binding_rank

        result = plan(
            PlanRequest(
                model=args.model,
                gpu=args.gpu or DEFAULT_GPU,
                flags={
                    "tensor_parallel_size": args.tensor_parallel_size,
                    "data_parallel_size": args.data_parallel_size,
                    "enable_expert_parallel": args.enable_expert_parallel,
                },
            )
        )
        _, model, headroom = binding_rank(result)
        if not flags and not args.dtype:
            return model, headroom
        spec, moe = result.model, result.model.moe
        base = ModelWidths(
            hidden_size=spec.hidden_size,
            dtype_bytes=model.dtype_bytes,
            intermediate_size=moe.expert_intermediate_size if moe else spec.intermediate_size,
            vocab_size=spec.vocab_size,
            num_experts=moe.num_experts if moe else 0,
            experts_per_token=moe.experts_per_token if moe else 0,
        )
    else:
        if "hidden_size" not in flags:
            raise ConfigError("give --hidden-size (or --model for the model's widths)")
        base = ModelWidths(
            hidden_size=0,
            dtype_bytes=2.0,
            num_experts=args.num_experts,
            experts_per_token=args.experts_per_token,
        )
        headroom = None
    widths = replace(
        base,
        **flags,
        tensor_parallel_size=args.tensor_parallel_size,
        data_parallel_size=args.data_parallel_size,
        expert_parallel=args.enable_expert_parallel,
        dtype_bytes=dtype_bytes(args.dtype) if args.dtype else base.dtype_bytes,
    )
    return ActivationModel.from_widths(widths, args.sampler_copies), headroom


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    shape = parse_scheduled(args.scheduled)
    model, planned_headroom = _activation(args)
    free = parse_bytes(args.free) if args.free else planned_headroom
    try:
        packed = step_memory(shape, model, StepMemoryOptions("packed", args.tensors_alive))
        padded = step_memory(shape, model, StepMemoryOptions("padded", args.tensors_alive))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    out = {
        "shape": shape.describe(),
        "num_tokens": packed.num_tokens,
        "num_prefills": packed.num_prefills,
        "num_decodes": packed.num_decodes,
        "max_prefill_len": packed.max_prefill_len,
        "hidden_size": model.hidden_size,
        "dtype_bytes": model.dtype_bytes,
        "activation_source": model.source,
        "packed_tensor_bytes": packed.packed_tensor_bytes,
        "padded_tensor_bytes": padded.padded_tensor_bytes,
        "padding_ratio": round(padded.padding_ratio, 4),
        "row_padding": [round(x, 2) for x in padded.row_padding],
        "tensors_alive": args.tensors_alive,
        "max_tensor_elements": padded.max_tensor_elements,
        "packed_max_tensor_elements": packed.max_tensor_elements,
        "int32_index_limit": INT32_INDEX_LIMIT,
        "exceeds_int32_index": padded.exceeds_int32_index,
        "forward_bytes": packed.forward_bytes,
        "padded_layer_bytes": padded.padded_layer_bytes,
        "ep_dispatch_bytes": packed.ep_dispatch_bytes,
        "ep_combine_bytes": packed.ep_combine_bytes,
        "sampler_rows": packed.sampler_rows,
        "sampler_logits_bytes": packed.sampler_bytes,
        "fixed_bytes": packed.fixed_bytes,
        "packed_peak_bytes": packed.peak_bytes,
        "padded_peak_bytes": padded.peak_bytes,
        "packed": asdict(packed),
        "padded": asdict(padded),
        "free_bytes": free,
        "free_source": "--free" if args.free else ("planner headroom" if free is not None else None),
        "oom_packed": (packed.peak_bytes > free) if free is not None else None,
        "oom_padded": (padded.peak_bytes > free) if free is not None else None,
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    h = model.hidden_size
    print(f"step: {shape.describe()}, width {h:,} x {model.dtype_bytes:g} B ({model.source})")
    print(
        f"  per tensor     packed {format_gib(packed.packed_tensor_bytes)} ({packed.num_tokens:,} x {h:,})"
        f", padded {format_gib(padded.padded_tensor_bytes)} ({padded.num_prefills} x "
        f"{padded.max_prefill_len:,}"
        f" x {h:,})"
    )
    worst = max(padded.row_padding, default=1.0)
    print(f"  padding        {padded.padding_ratio:.2f}x overall; the shortest row padded {worst:,.0f}x")
    print(
        f"  forward        {format_gib(packed.forward_bytes)} (hidden streams + the widest layer, as the "
        "planner "
        "sizes the profile run)"
    )
    print(
        f"  padded layer   {format_gib(padded.padded_layer_bytes)} (hidden streams + {args.tensors_alive} "
        "padded "
        "intermediates alive)"
    )
    print(
        f"  int32 index    largest tensor {padded.max_tensor_elements:,} elements "
        + (
            "> 2^31: int32 indexing fails (canUse32BitIndexMath)"
            if padded.exceeds_int32_index
            else "< 2^31: ok"
        )
    )
    if packed.ep_dispatch_bytes:
        print(
            f"  EP buffers     all-gather {format_gib(packed.ep_dispatch_bytes)}, "
            f"reduce-scatter {format_gib(packed.ep_combine_bytes)}"
        )
    if packed.sampler_bytes:
        print(
            f"  sampler        {packed.sampler_rows} rows: {format_gib(packed.sampler_bytes)} of fp32 logits"
        )
    print(
        f"  step peak      packed {format_gib(packed.peak_bytes)} ({packed.peak_part}), "
        f"padded {format_gib(padded.peak_bytes)} ({padded.peak_part}), "
        f"both incl. {format_gib(packed.fixed_bytes)} fixed"
    )
    if free is not None:
        for name, m in (("packed", packed), ("padded", padded)):
            verdict = "OOM" if m.peak_bytes > free else "fits"
            print(f"  {name:<6} vs free {format_gib(free)}: {verdict}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
