"""The watch detectors as Prometheus recording and alerting rules, for fleets that run Prometheus.

Same `Thresholds` as `watch`, translated to PromQL:
- leak / time to exhaustion: headroom / deriv(used[window]) (for a GPU, DCGM's free / deriv(used)), with
  deriv over the older half of the window (`offset`) also positive, so a one-off step does not read as a leak;
- KV saturation: predict_linear(usage[kv_window], kv_horizon) >= kv_high; full: usage >= kv_high;
- queue growth: deriv(waiting[queue_window]) > 0 and waiting >= queue_min;
- preemptions: rate(vllm:num_preemptions_total[window]) * 60 >= per-minute threshold;
- DP imbalance: (max - min) / mean by model_name of the KV usage averaged over the window
  (`oomguard.imbalance`, the definition simulate and watch use);
- host memory: cAdvisor working set over the container limit, its trend, and OOM events;
- restarts: resets() of vLLM counters, changes() of process_start_time_seconds.
Metric names old and new are joined with `or` (label-set matching ignores the metric name).
GPU memory comes from dcgm-exporter (DCGM_FI_DEV_FB_USED / _FREE, MiB), host memory from cAdvisor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml  # type: ignore[import-untyped,unused-ignore]

from oomguard.imbalance import promql_imbalance
from oomguard.units import MiB
from oomguard.watch.detectors import Thresholds
from oomguard.watch.durations import prom_duration
from oomguard.watch.growth import GrowthRule

P = "oomguard:"  # namespace of the recorded series


@dataclass(frozen=True)
class RuleOptions:
    selector: str = ""  # vLLM targets, e.g. job="vllm"
    gpu_selector: str = ""  # dcgm-exporter series
    container_selector: str = 'container!="",container!="POD"'  # cAdvisor series of real containers
    for_s: float = 300.0  # how long a condition must hold before the alert fires
    group: str = "oomguard"


def _sel(metric: str, selector: str) -> str:
    selector = selector.strip().strip("{}").strip()
    return f"{metric}{{{selector}}}" if selector else metric


def recording_rules(t: Thresholds, o: RuleOptions) -> list[dict[str, str]]:
    def s(metric: str) -> str:
        return _sel(metric, o.selector)

    kv_avg = f"avg_over_time({P}vllm_kv_cache_usage:ratio[{prom_duration(t.imbalance_window_s)}])"
    return [
        {
            "record": f"{P}vllm_kv_cache_usage:ratio",
            "expr": f"{s('vllm:kv_cache_usage_perc')} or {s('vllm:gpu_cache_usage_perc')}",
        },
        {"record": f"{P}vllm_requests_waiting", "expr": s("vllm:num_requests_waiting")},
        {"record": f"{P}vllm_requests_running", "expr": s("vllm:num_requests_running")},
        {
            "record": f"{P}vllm_preemptions:rate_per_min",
            "expr": f"rate({s('vllm:num_preemptions_total')}[{prom_duration(t.preemption_window_s)}]) * 60",
        },
        {"record": f"{P}vllm_kv_cache_usage:avg", "expr": kv_avg},
        {
            "record": f"{P}vllm_dp_imbalance:ratio",
            "expr": promql_imbalance(f"{P}vllm_kv_cache_usage:avg", by="job, model_name")
            + f" and count by (job, model_name) ({P}vllm_kv_cache_usage:avg) > 1",
        },
        {
            "record": f"{P}gpu_memory_used:bytes",
            "expr": f"{_sel('DCGM_FI_DEV_FB_USED', o.gpu_selector)} * {MiB}",
        },
        {
            "record": f"{P}gpu_memory_total:bytes",
            "expr": f"({_sel('DCGM_FI_DEV_FB_USED', o.gpu_selector)} + "
            f"{_sel('DCGM_FI_DEV_FB_FREE', o.gpu_selector)})"
            f" * {MiB}",
        },
        {
            "record": f"{P}container_memory_working_set:bytes",
            "expr": _sel("container_memory_working_set_bytes", o.container_selector),
        },
        {
            "record": f"{P}container_memory_limit:bytes",
            "expr": f"{_sel('container_spec_memory_limit_bytes', o.container_selector)} > 0",
        },
    ]


def _eta_expr(headroom: str, used: str, window_s: float, horizon_s: float) -> str:
    """Seconds until `headroom` is used up at the slope of `used`: `GrowthRule`, the definition watch
    evaluates itself."""
    return GrowthRule(window_s, horizon_s, horizon_s).promql(headroom, used)


def _alert(
    name: str, expr: str, severity: str, summary: str, description: str, fix: str, for_s: float
) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_s > 0:
        rule["for"] = prom_duration(for_s)
    rule["labels"] = {"severity": severity, "source": "oomguard"}
    rule["annotations"] = {"summary": summary, "description": description, "fix": fix}
    return rule


def alerting_rules(t: Thresholds, o: RuleOptions) -> list[dict[str, Any]]:
    def s(metric: str) -> str:
        return _sel(metric, o.selector)

    kv, waiting = f"{P}vllm_kv_cache_usage:ratio", f"{P}vllm_requests_waiting"
    mem, limit = f"{P}container_memory_working_set:bytes", f"{P}container_memory_limit:bytes"
    fb_used, fb_free = (
        _sel("DCGM_FI_DEV_FB_USED", o.gpu_selector),
        _sel("DCGM_FI_DEV_FB_FREE", o.gpu_selector),
    )
    ws = _sel("container_memory_working_set_bytes", o.container_selector)
    ws_limit = _sel("container_spec_memory_limit_bytes", o.container_selector)
    restart_window = prom_duration(t.restart_window_s)
    vllm_targets = f"group by (instance, job) ({s('vllm:num_requests_running')})"
    return [
        _alert(
            "OomguardGpuMemoryLeak",
            _eta_expr(fb_free, fb_used, t.leak_window_s, t.horizon_s),
            "critical",
            "GPU {{ $labels.gpu }} on {{ $labels.instance }}: memory runs out in {{ $value | "
            "humanizeDuration }}",
            f"GPU memory used rises steadily over {prom_duration(t.leak_window_s)} (both halves); at this "
            "slope "
            "it reaches the device total in {{ $value | humanizeDuration }}. vLLM preallocates its KV cache, "
            "so "
            "a rise at steady load is a leak, fragmentation or another process.",
            "restart before the estimate; then bisect versions, custom ops and non-default flags",
            o.for_s,
        ),
        _alert(
            "OomguardKvCacheFull",
            f"avg_over_time({kv}[{prom_duration(max(t.kv_window_s / 10, 60))}]) >= {t.kv_high:g}",
            "warning",
            "vLLM {{ $labels.instance }} engine {{ $labels.engine }}: KV cache {{ $value | "
            "humanizePercentage }} full",
            "New requests wait for free KV blocks or running ones are preempted.",
            "limit concurrency or lower --max-num-seqs; --kv-cache-dtype fp8, shorter --max-model-len, "
            "more TP or replicas",
            o.for_s,
        ),
        _alert(
            "OomguardKvCacheSaturating",
            f"predict_linear({kv}[{prom_duration(t.kv_window_s)}], {t.kv_horizon_s:g}) >= {t.kv_high:g} "
            f"and {kv} < {t.kv_high:g} and deriv({kv}[{prom_duration(t.kv_window_s)}]) > 0",
            "warning",
            "vLLM {{ $labels.instance }} engine {{ $labels.engine }}: KV cache saturates within "
            f"{prom_duration(t.kv_horizon_s)}",
            f"KV usage trend over {prom_duration(t.kv_window_s)} reaches {t.kv_high:g} within "
            f"{prom_duration(t.kv_horizon_s)}.",
            "throttle at the gateway or add replicas before it saturates",
            o.for_s,
        ),
        _alert(
            "OomguardQueueGrowing",
            f"deriv({waiting}[{prom_duration(t.queue_window_s)}]) > 0 and {waiting} >= "
            f"{t.queue_min_waiting:g}",
            "warning",
            "vLLM {{ $labels.instance }} engine {{ $labels.engine }}: waiting queue growing "
            '({{ $value | printf "%.0f" }} waiting)',
            "Arrival rate exceeds what the engine serves; with the KV cache full it is KV-bound.",
            "add replicas or throttle; if KV has room, a higher --max-num-seqs (re-plan first)",
            o.for_s,
        ),
        _alert(
            "OomguardPreemptions",
            f"{P}vllm_preemptions:rate_per_min >= {t.preemptions_per_min:g}",
            "warning",
            'vLLM {{ $labels.instance }} engine {{ $labels.engine }}: {{ $value | printf "%.1f" }} '
            "preemptions/min",
            "The KV cache is oversubscribed: preempted requests are recomputed.",
            "lower --max-num-seqs or --max-num-batched-tokens, or limit concurrency",
            o.for_s,
        ),
        _alert(
            "OomguardDpImbalance",
            f"{P}vllm_dp_imbalance:ratio > {t.imbalance:g} and on (job, model_name) "
            f"avg by (job, model_name) ({P}vllm_kv_cache_usage:avg) >= {t.imbalance_min_kv:g}",
            "warning",
            "{{ $labels.model_name }}: data-parallel ranks {{ $value | humanizePercentage }} apart in KV "
            "usage",
            f"(max - min) / mean of the ranks' KV usage over {prom_duration(t.imbalance_window_s)} exceeds "
            f"{t.imbalance:g}; the hottest rank saturates and preempts first.",
            "check the router (sticky sessions, prefix affinity); prefer least-outstanding-requests",
            o.for_s,
        ),
        _alert(
            "OomguardHostMemoryNearLimit",
            f"{mem} / {limit} >= {t.host_memory_ratio:g}",
            "warning",
            "{{ $labels.namespace }}/{{ $labels.pod }} {{ $labels.container }}: host memory "
            "{{ $value | humanizePercentage }} of its limit",
            "Container working set near its memory limit: the kernel OOM killer (exit 137, OOMKilled) is "
            "next.",
            "raise the memory limit, fewer replicas per node, serialize model loading, less CPU offload",
            o.for_s,
        ),
        _alert(
            "OomguardHostMemoryLeak",
            t.host_growth.promql(f"({ws_limit} > 0) - {ws}", ws),
            "warning",
            "{{ $labels.namespace }}/{{ $labels.pod }} {{ $labels.container }}: memory limit reached in "
            "{{ $value | humanizeDuration }}",
            "Working set rises steadily towards the container limit.",
            "restart before the estimate; find what grows (tokenizer caches, offload, API servers)",
            o.for_s,
        ),
        _alert(
            "OomguardOomKilled",
            f"increase({_sel('container_oom_events_total', o.container_selector)}[{restart_window}]) > 0",
            "critical",
            "{{ $labels.namespace }}/{{ $labels.pod }}: the OOM killer fired",
            "Host (container) memory, not GPU memory, ran out.",
            "raise the memory limit or cut host memory use",
            0.0,
        ),
        _alert(
            "OomguardVllmRestarted",
            f"max by (instance, job) (resets({s('vllm:prompt_tokens_total')}[{restart_window}])) > 0 or "
            f"max by (instance, job) (changes(process_start_time_seconds[{restart_window}]) > 0 "
            f"and on (instance, job) {vllm_targets})",
            "warning",
            "vLLM {{ $labels.instance }} restarted in the last " + restart_window,
            "Counters reset or the process start time changed.",
            "find why it died: oomguard diagnose on its last log, dmesg, kubectl describe",
            0.0,
        ),
    ]


def rule_groups(t: Thresholds | None = None, o: RuleOptions | None = None) -> dict[str, Any]:
    t = t or Thresholds()
    o = o or RuleOptions()
    return {
        "groups": [
            {"name": f"{o.group}-recording", "rules": recording_rules(t, o)},
            {"name": f"{o.group}-alerts", "rules": alerting_rules(t, o)},
        ]
    }


def rules_yaml(t: Thresholds | None = None, o: RuleOptions | None = None) -> str:
    header = (
        "# Prometheus rules generated by `oomguard rules`: the watch detectors for a fleet.\n"
        "# Check: promtool check rules FILE. Load: rule_files in prometheus.yml.\n"
    )
    return header + str(yaml.safe_dump(rule_groups(t, o), sort_keys=False, width=10_000, allow_unicode=True))
