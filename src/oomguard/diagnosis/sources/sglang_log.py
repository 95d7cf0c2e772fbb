"""SGLang server logs: the weight-load and memory-pool lines, the CUDA-graph lines, the batch lines (running,
queue, token usage), the server-args line, its memory errors (its "GB" is GiB) and its KV allocator's own leak
check."""

from __future__ import annotations

import re

from oomguard.diagnosis.evidence import Flags, LoadSample, Version
from oomguard.diagnosis.scan import Line
from oomguard.diagnosis.sources.base import LineParser, Message, to_float
from oomguard.diagnosis.sources.triggers import Triggers
from oomguard.diagnosis.sources.vllm_log import clean_value, parse_argv
from oomguard.units import GiB as _GIB
from oomguard.units import MiB as _MIB

_LOAD_END = re.compile(
    r"Load weight end\..*?avail mem=(?P<avail>[\d.]+) GB,\s*mem usage=(?P<usage>[\d.]+) GB"
)
# model_runner.load_model, before any weight: what the device had free once this rank's CUDA context and
# distributed groups were up (SGLang v0.3-v0.5, python/sglang/srt/model_executor/model_runner.py).
_LOAD_BEGIN = re.compile(r"Load weight begin\. avail mem=(?P<avail>[\d.]+) GB")
_PROFILED = re.compile(r"max_total_tokens=(?P<want>\d+) is larger than the profiled value (?P<v>-?\d+)")
_TOTAL_TOKENS = re.compile(r"max_total_num_tokens=(?P<v>-?\d+)")
_BATCH = re.compile(
    r"#running-req:\s*(?P<run>\d+).*?token usage:\s*(?P<u>\d+(?:\.\d+)?)(?:.*?#queue-req:\s*(?P<q>\d+))?"
)
_ARGS = re.compile(r"server_args=ServerArgs\((?P<a>.*)\)")
_ARG = re.compile(r"(?P<k>\w+)=(?P<v>'[^']*'|\"[^\"]*\"|[^,]+)")
_VERSION = re.compile(r"sglang(?:==| version:? )v?(?P<v>\d+\.\d+[\w.+-]*)", re.IGNORECASE)
_LEAK_CHECK = re.compile(r"available_size=(?P<avail>\d+).*?max_total_num_tokens=(?P<total>\d+)")
# A hybrid model's recurrent-state pool (model_runner_kv_cache_mixin.py handle_max_mamba_cache, 0.5): what the
# static fraction left after the weights holds no request's state: "Not enough GPU memory for hybrid
# (mamba/linear-attention) state cache. Computed max_mamba_cache_size=-31 (total_rest_memory=-8.63 GB,
# mamba_cache_per_req=140.78 MB)."
_HYBRID_STATE = re.compile(
    r"max_mamba_cache_size=(?P<n>-?\d+) \(total_rest_memory=(?P<rest>-?[\d.]+) GB, "
    r"mamba_cache_per_req=(?P<per>[\d.]+) MB\)"
)
# model_runner_kv_cache_mixin.py profile_max_num_token (0.5): the weights' share of what was free before they
# loaded is the least fraction that leaves any KV: "Raise --mem-fraction-static above 0.473 (minimum viable =
# 1 - available/pre = 0.4726)".
_MIN_VIABLE = re.compile(r"minimum viable = 1 - available/pre = (?P<v>-?[\d.]+)")
_LAUNCH = re.compile(r"sglang\.launch_server(?P<rest>.*)")
# CUDA-graph capture, every graph SGLang captures (model_runner / cuda_graph_runner, eagle_worker): the decode
# graphs "Capture cuda graph begin. This can take up to several minutes. avail mem=..." and their batch sizes
# "Capture cuda graph bs [1, 2, 4]", the prefill ones "Capture piecewise CUDA graph begin", the draft model's
# "Capture draft cuda graph begin" / "Capture draft extend cuda graph begin", each with its "... end. Time
# elapsed: ..." line, and the progress bar "Capturing batches (bs=128 avail_mem=57.52 GB)".
_CAPTURE = re.compile(
    r"\bCapture (?:draft (?:extend )?|piecewise )?cuda graph (?P<edge>begin|end|bs)\b"
    r"|\bCapturing batches \(bs=",
    re.IGNORECASE,
)
# The HTTP server is up (sglang/srt/entrypoints/http_server.py, after the warm-up request).
_READY = "The server is fired up and ready to roll"


class Parser(LineParser):
    TRIGGERS = Triggers(
        words=(
            "#running-req",
            "Load weight end",
            "Load weight begin",
            "profiled value",
            "max_total_num_tokens",
            "KV Cache is allocated",
            "Memory pool end",
            "apture cuda graph",
            "apture CUDA graph",
            "apture piecewise",
            "apture draft",
            "Capturing batches",
            _READY,
            "apture cuda graph failed",
            "apture CUDA graph failed",
            "Piecewise CUDA Graph failed",
            "Prefill out of memory",
            "Decode out of memory",
            "Not enough memory",
            "memory capacity is unbalanced",
            "leave no GPU memory for the KV cache",
            "Not enough GPU memory for hybrid",
            "memory leak detected",
            "Retract",
            "retract",
            "ServerArgs(",
            "sglang",
        )
    )

    def feed(self, line: Line, msg: Message) -> None:
        body = msg.body
        if "token usage" in body and "#running-req" in body:
            m = _BATCH.search(body)
            if m:
                self.ctx.emit(
                    LoadSample(
                        where=self.ctx.where(line),
                        text=self.ctx.clip(body),
                        running=int(m.group("run")),
                        waiting=int(m.group("q")) if m.group("q") else None,
                        kv_usage=float(m.group("u")),
                        engine=msg.tag,
                    )
                )
            return
        if "Load weight end" in body:
            m = _LOAD_END.search(body)
            if m:
                self.ctx.startup_number(
                    line, msg, "sglang_avail_after_load_bytes", float(m.group("avail")) * _GIB
                )
                self.ctx.startup_number(line, msg, "sglang_weights_bytes", float(m.group("usage")) * _GIB)
            self.ctx.signal(line, body, "milestone-weights-loaded")
        if "Load weight begin" in body:
            m = _LOAD_BEGIN.search(body)
            if m:
                self.ctx.startup_number(line, msg, "free_at_start_bytes", float(m.group("avail")) * _GIB)
            self.ctx.signal(line, body, "milestone-weights-loading")
        if "profiled value" in body:
            m = _PROFILED.search(body)
            if m and int(m.group("v")) <= 0:
                self.ctx.signal(
                    line, body, "sglang-negative-token-budget", profiled_tokens=float(m.group("v"))
                )
        if "max_total_num_tokens" in body:
            m = _TOTAL_TOKENS.search(body)
            if m:
                value = int(m.group("v"))
                self.ctx.startup_number(line, msg, "sglang_max_total_tokens", value)
                if value <= 0:
                    self.ctx.signal(line, body, "sglang-negative-token-budget", profiled_tokens=value)
            elif "negative" in body.lower():
                self.ctx.signal(line, body, "sglang-negative-token-budget")
        if "KV Cache is allocated" in body or "Memory pool end" in body:
            self.ctx.signal(line, body, "milestone-kv-sized")
        if "aptur" in body:
            m = _CAPTURE.search(body)
            if m and m.group("edge") and m.group("edge").lower() == "end":
                self.ctx.signal(line, body, "milestone-cudagraph-done")
            elif m:
                self.ctx.signal(line, body, "milestone-cudagraph-start")
        if _READY in body:
            self.ctx.signal(line, body, "milestone-serving")
        # The decode graphs' runner (cuda_graph_runner.py: "Capture cuda graph failed: <error>") and the
        # prefill's piecewise graphs (compilation/piecewise_context_manager.py: "Piecewise CUDA Graph failed
        # with error: <error>"), each followed by its remedies; a memory error in it is the capture's.
        if (
            "apture cuda graph failed" in body
            or "apture CUDA graph failed" in body
            or "Piecewise CUDA Graph failed" in body
        ) and "memory" in body:
            self.ctx.signal(line, body, "sglang-cudagraph-failed")
        if ("Prefill out of memory" in body or "Decode out of memory" in body) and "batch size" in body:
            self.ctx.signal(line, body, "sglang-kv-alloc-failed")
        if "Not enough memory" in body and "mem-fraction-static" in body:
            self.ctx.signal(line, body, "sglang-not-enough-memory")
        if "Not enough GPU memory for hybrid" in body:
            m = _HYBRID_STATE.search(body)
            self.ctx.signal(
                line,
                body,
                "sglang-not-enough-memory",
                state_slots=float(m.group("n")) if m else None,
                rest_bytes=float(m.group("rest")) * _GIB if m else None,
                per_request_bytes=float(m.group("per")) * _MIB if m else None,
            )
        if "leave no GPU memory for the KV cache" in body:
            # "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=.."
            m = _MIN_VIABLE.search(body)
            self.ctx.signal(
                line, body, "sglang-not-enough-memory", weights_share=to_float(m.group("v")) if m else None
            )
        if "memory leak detected" in body and (
            "kv_pool" in body or "req_to_token_pool" in body or "pool memory leak" in body
        ):
            # Newer SGLang's invariant checker: "pool memory leak detected! [full] total=N, available=M".
            # The scheduler's idle self-check (check_memory): "token_to_kv_pool_allocator memory leak
            # detected! available_size=..., protected_size=..., self.max_total_num_tokens=...".
            m = _LEAK_CHECK.search(body)
            self.ctx.signal(
                line,
                body,
                "engine-leak-check",
                available_tokens=to_float(m.group("avail")) if m else None,
                total_tokens=to_float(m.group("total")) if m else None,
            )
        if "memory capacity is unbalanced" in body:
            self.ctx.signal(line, body, "sglang-unbalanced-memory")
        # The scheduler's retraction notice: "KV cache pool is full. Retract requests. #retracted_reqs: 1,
        # #new_token_ratio: 0.5000 -> 0.9000" (0.3+); before, "Decode out of memory happened. #retracted_reqs:
        # 1, #new_token_ratio: ..." (managers/tp_worker.py, 0.1-0.3), whose first sentence is what gets
        # quoted.
        if (
            ("Retract" in body or "retract" in body)
            and ("KV cache pool is full" in body or "#retracted" in body or "Retract requests" in body)
        ) or "Decode out of memory happened" in body:
            self.ctx.signal(line, body, "sglang-retract")
        if "ServerArgs(" in body:
            m = _ARGS.search(body)
            if m:
                items = tuple((a.group("k"), clean_value(a.group("v"))) for a in _ARG.finditer(m.group("a")))
                self.ctx.emit(
                    Flags(
                        where=self.ctx.where(line),
                        text=self.ctx.clip(body),
                        origin="sglang-args",
                        flags=items + (("engine", "sglang"),),
                    )
                )
        if "sglang" in body:
            m = _LAUNCH.search(body)
            if m:
                flags = parse_argv(m.group("rest"), positional_model=False)
                self.ctx.emit(
                    Flags(
                        where=self.ctx.where(line),
                        text=self.ctx.clip(body),
                        origin="command-line",
                        flags=tuple(flags.items()) + (("engine", "sglang"),),
                    )
                )
            v = _VERSION.search(body)
            if v:
                self.ctx.emit(
                    Version(
                        where=self.ctx.where(line),
                        text=self.ctx.clip(body),
                        engine="sglang",
                        version=v.group("v"),
                    )
                )
        if (
            "[" in line.text[:3]
            and " TP" in line.text[:40]
            and msg.tag.startswith(("TP", "DP"))
            and "Decode batch" not in body
        ):
            pass  # SGLang's own prefix ("[2025-07-02 07:41:58 DP0 TP0]"): recognised by split_prefix
