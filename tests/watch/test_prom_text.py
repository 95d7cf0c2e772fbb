"""The Prometheus text format parser: what vLLM serves, and what broken servers and proxies serve instead."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oomguard.errors import InputFormatError
from oomguard.watch.prom_text import parse, parse_strict

from .exporter import render, steady

BODY = """\
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
# A free comment is ignored.
# HELP vllm:time_to_first_token_seconds Histogram of time\\nto first token, in \\\\seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.5",model_name="m"} 4.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 7.0 1718000000000
vllm:time_to_first_token_seconds_count{model_name="m"} 7.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 1.25
# TYPE weird gauge
weird{path="C:\\\\dir",quote="say \\"hi\\"",nl="a\\nb",}  NaN
weird{path="x"} -Inf
untyped_one 1e3
"""


def test_types_help_and_histogram_samples_group_into_families() -> None:
    exposition = parse(BODY)
    ttft = exposition.family("vllm:time_to_first_token_seconds")
    assert ttft is not None and ttft.type == "histogram"
    assert [s.name for s in ttft.samples] == ["vllm:time_to_first_token_seconds_bucket"] * 2 + [
        "vllm:time_to_first_token_seconds_count",
        "vllm:time_to_first_token_seconds_sum",
    ]
    assert ttft.help == "Histogram of time\nto first token, in \\seconds."
    assert exposition.family("vllm:num_requests_waiting").samples[0].value == 3.0  # type: ignore[union-attr]
    assert not exposition.skipped and not exposition.truncated


def test_inf_nan_and_timestamps_are_read_as_prometheus_reads_them() -> None:
    samples = parse(BODY).samples()
    inf_bucket = next(s for s in samples if s.label("le") == "+Inf")
    assert inf_bucket.timestamp_ms == 1718000000000 and inf_bucket.value == 7.0
    assert inf_bucket.lineno == 8  # counted in the body, comments included
    weird = [s for s in samples if s.name == "weird"]
    assert math.isnan(weird[0].value) and weird[1].value == -math.inf
    assert next(s for s in samples if s.name == "untyped_one").value == 1000.0


def test_label_values_unescape_backslash_quote_and_newline() -> None:
    weird = next(s for s in parse(BODY).samples() if s.name == "weird")
    assert weird.label("path") == "C:\\dir"
    assert weird.label("quote") == 'say "hi"'
    assert weird.label("nl") == "a\nb"


def test_counter_created_samples_stay_with_their_total_family() -> None:
    exposition = parse(render(steady(2)))
    family = exposition.family("vllm:num_preemptions_total")
    assert family is not None and family.type == "counter"
    assert {s.name for s in family.samples} == {"vllm:num_preemptions_total", "vllm:num_preemptions_created"}


def test_a_body_cut_mid_line_loses_only_that_line() -> None:
    whole = render(steady(2)).encode()
    cut = whole[: whole.index(b"vllm:kv_cache_usage_perc{") + 40]
    exposition = parse(cut)
    assert exposition.truncated
    assert exposition.skipped[-1].reason.startswith("body ends without a newline")
    assert exposition.family("vllm:num_requests_running") is not None
    assert exposition.family("vllm:kv_cache_usage_perc").samples == ()  # type: ignore[union-attr]


def test_invalid_utf8_and_malformed_lines_are_skipped_and_named() -> None:
    body = b'good 1\n\xff\xfe{garbage 2\nbad{label=unquoted} 3\nalso_good{a="1"} 4\nno_value{a="1"}\n'
    exposition = parse(body)
    assert [s.name for s in exposition.samples()] == ["good", "also_good"]
    assert next((s.lineno, s.reason) for s in exposition.skipped) == (2, "not valid UTF-8")
    assert {s.lineno for s in exposition.skipped} == {2, 3, 5}


def test_binary_garbage_yields_no_samples_and_no_exception() -> None:
    body = bytes(range(256)) * 40
    exposition = parse(body)
    assert exposition.num_samples == 0 and exposition.skipped


def test_strict_parsing_names_the_first_bad_line() -> None:
    with pytest.raises(InputFormatError, match="line 2"):
        parse_strict("ok 1\nnot a metric line at all\n")


def test_duplicate_label_names_are_rejected() -> None:
    exposition = parse('m{a="1",a="2"} 1\n')
    assert exposition.num_samples == 0 and "given twice" in exposition.skipped[0].reason


def test_values_go_would_refuse_are_refused() -> None:
    exposition = parse("a 1_000\nb infinity\nc +Inf\n")
    assert [s.name for s in exposition.samples()] == ["c"]


def test_openmetrics_eof_and_exemplars_are_accepted() -> None:
    body = (
        '# TYPE foo counter\nfoo_total 17.0 # {trace_id="abc"} 1.0 1520879607.789\nfoo_created 1.5e9\n# EOF\n'
    )
    exposition = parse(body)
    assert not exposition.skipped
    assert [s.value for s in exposition.family("foo").samples] == [17.0, 1.5e9]  # type: ignore[union-attr]


label_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)


@given(
    st.dictionaries(st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,10}", fullmatch=True), label_text, max_size=4),
    st.floats(allow_nan=False),
)
def test_any_label_values_survive_escaping(labels: dict[str, str], value: float) -> None:
    escaped = ",".join(
        f'{k}="' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
        for k, v in labels.items()
    )
    text = f"metric_x{{{escaped}}} {repr(value).replace('inf', 'Inf')}\n"
    [sample] = parse(text).samples()
    assert dict(sample.labels) == labels
    assert sample.value == value
