"""Scraping a real local HTTP endpoint: good bodies, broken answers, dead servers, and the backoff."""

from __future__ import annotations

import socket

import pytest

from oomguard.errors import ConfigError
from oomguard.watch.scrape import Scraper, normalize_url, scrape_once

from .exporter import Exporter, steady


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_vllm_endpoint_yields_samples_and_models() -> None:
    with Exporter(lambda n: steady(n, engines=2)) as exporter:
        outcome = scrape_once(exporter.url, 2.0, now=123.0)
    assert outcome.ok and outcome.error == "" and outcome.ts == 123.0
    assert {s.engine for s in outcome.samples if s.metric == "kv_cache_usage"} == {"0", "1"}
    assert outcome.models == {
        "0": "meta-llama/Llama-3.1-8B-Instruct",
        "1": "meta-llama/Llama-3.1-8B-Instruct",
    }


def test_an_html_error_page_is_a_failed_scrape_with_its_reason() -> None:
    with Exporter(steady) as exporter:
        exporter.raw = b"<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>"
        exporter.content_type = "text/html"
        outcome = scrape_once(exporter.url, 2.0)
    assert not outcome.ok and "HTML page" in outcome.error and outcome.samples == ()


def test_an_http_error_status_is_named() -> None:
    with Exporter(steady) as exporter:
        exporter.status = 503
        exporter.raw = b"Service Unavailable\n"
        outcome = scrape_once(exporter.url, 2.0)
    assert not outcome.ok and outcome.error.startswith("HTTP 503")


def test_garbage_bytes_are_a_failed_scrape_not_an_exception() -> None:
    with Exporter(steady) as exporter:
        exporter.raw = bytes(range(256)) * 64
        outcome = scrape_once(exporter.url, 2.0)
    assert not outcome.ok and outcome.error.startswith("no metrics in the body")


def test_a_truncated_body_keeps_what_was_complete_and_says_so() -> None:
    with Exporter(steady) as exporter:
        body = exporter.body()
        exporter.raw = body[: body.index(b"vllm:num_preemptions_total")]
        outcome = scrape_once(exporter.url, 2.0)
    assert outcome.ok and outcome.skipped_lines == 1 and "cut short" in outcome.note
    assert {s.metric for s in outcome.samples} >= {"kv_cache_usage", "requests_running"}
    assert "preemptions" not in {s.metric for s in outcome.samples}


def test_a_server_that_does_not_answer_in_time_times_out() -> None:
    with Exporter(steady) as exporter:
        exporter.delay_s = 1.0
        outcome = scrape_once(exporter.url, 0.2)
    assert not outcome.ok and outcome.error == "timed out" and outcome.duration < 0.9


def test_a_closed_port_is_connection_refused() -> None:
    outcome = scrape_once(f"http://127.0.0.1:{_free_port()}/metrics", 1.0)
    assert not outcome.ok and outcome.error == "connection refused"


def test_a_failing_target_is_retried_with_doubling_backoff() -> None:
    url = f"http://127.0.0.1:{_free_port()}/metrics"
    scraper = Scraper([url], timeout=0.5, backoff_base=1.0, backoff_max=4.0)
    attempts = []
    for now in range(20):
        for outcome in scraper.scrape_due(float(now)):
            attempts.append(now)
    assert attempts == [0, 1, 3, 7, 11, 15, 19]  # waits 1, 2, 4, then capped at 4


def test_urls_are_normalized_to_their_metrics_path() -> None:
    assert normalize_url("localhost:8000") == "http://localhost:8000/metrics"
    assert normalize_url("http://127.0.0.1:8001/") == "http://127.0.0.1:8001/metrics"
    assert normalize_url("https://h/custom/metrics") == "https://h/custom/metrics"
    with pytest.raises(ConfigError):
        normalize_url("ftp://h/metrics")
    with pytest.raises(ConfigError):
        normalize_url("http://h:port/")
