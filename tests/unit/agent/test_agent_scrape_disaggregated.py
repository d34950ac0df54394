"""Scraping a prefill/decode-disaggregated vLLM deployment: prompt tokens by source
(vllm:prompt_tokens_by_source), the NixlConnector's KV transfers (bytes, transfers, failures) with their
rates, and a vLLM router's /metrics read by the same scraper (up, its requests summed over workers).

tests/fixtures/vllm_metrics_nixl_decode.txt is not a capture: its header says how it was rendered from
vLLM 0.32's metric definitions. `_decode_dump` writes the same families for several engines at once, in
the exposition format that file has (HELP/TYPE once per family, one line per engine, `_created` gauges)."""

from __future__ import annotations

from pathlib import Path

import pytest
from meshdeck_agent.metric_registry import WORKER, lookup
from meshdeck_agent.scrape import ScrapeLoop, VllmMetrics, parse_vllm_metrics

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
DECODE = FIXTURES / "vllm_metrics_nixl_decode.txt"
AGENT_DUMPS = sorted((FIXTURES / "agent").glob("vllm_metrics_*.txt"))
MODEL = "meta-llama/Llama-3.1-8B-Instruct"

COUNTS = (
    "prompt_tokens_computed_total",
    "prompt_tokens_local_cache_total",
    "prompt_tokens_transferred_total",
    "kv_transfer_bytes_total",
    "kv_transfers_total",
    "kv_transfers_failed_total",
)
RATES = ("prompt_tokens_computed_per_s", "prompt_tokens_transferred_per_s", "kv_transfer_bytes_per_s")
NEW = (*COUNTS, *RATES, "router_requests_total")


def _entries(text: str, now: float = 1.0, metrics: VllmMetrics | None = None) -> dict[str, dict]:
    metrics = metrics or VllmMetrics("w1")
    return {e.engine: dict(e.metrics) for e in metrics.update(now, parse_vllm_metrics(text))}


def _decode_dump(engines: dict[str, tuple[float, float, float, float, int, int]]) -> str:
    """engine -> (computed, local cache hit, transferred prompt tokens, bytes pulled, transfers, failed)."""
    labels = {e: f'engine="{e}",model_name="{MODEL}"' for e in engines}
    text = "# HELP vllm:prompt_tokens_by_source_total Number of prompt tokens by source.\n"
    text += "# TYPE vllm:prompt_tokens_by_source_total counter\n"
    for e, (computed, hit, moved, *_rest) in engines.items():
        for source, value in (("local_compute", computed), ("local_cache_hit", hit), ("external_kv_transfer", moved)):
            text += f'vllm:prompt_tokens_by_source_total{{{labels[e]},source="{source}"}} {value}\n'
    text += "# HELP vllm:prompt_tokens_by_source_created Number of prompt tokens by source.\n"
    text += "# TYPE vllm:prompt_tokens_by_source_created gauge\n"
    for e in engines:
        for source in ("local_compute", "local_cache_hit", "external_kv_transfer"):
            text += f'vllm:prompt_tokens_by_source_created{{{labels[e]},source="{source}"}} 1.7964008505e+09\n'
    text += "# HELP vllm:nixl_xfer_time_seconds Histogram of transfer duration for NIXL KV Cache transfers.\n"
    text += "# TYPE vllm:nixl_xfer_time_seconds histogram\n"
    for e, (*_head, transfers, _failed) in engines.items():
        for le in ("0.005", "0.01", "+Inf"):
            text += f'vllm:nixl_xfer_time_seconds_bucket{{engine="{e}",le="{le}",model_name="{MODEL}"}} {transfers}.0\n'
        text += f"vllm:nixl_xfer_time_seconds_count{{{labels[e]}}} {transfers}.0\n"
        text += f"vllm:nixl_xfer_time_seconds_sum{{{labels[e]}}} {transfers * 0.006}\n"
    text += "# HELP vllm:nixl_bytes_transferred Histogram of bytes transferred per NIXL KV Cache transfers.\n"
    text += "# TYPE vllm:nixl_bytes_transferred histogram\n"
    for e, (_c, _h, _m, moved_bytes, transfers, _failed) in engines.items():
        for le in ("2.097152e+06", "8.388608e+06", "+Inf"):
            text += f'vllm:nixl_bytes_transferred_bucket{{engine="{e}",le="{le}",model_name="{MODEL}"}} {transfers}.0\n'
        text += f"vllm:nixl_bytes_transferred_count{{{labels[e]}}} {transfers}.0\n"
        text += f"vllm:nixl_bytes_transferred_sum{{{labels[e]}}} {moved_bytes}\n"
    text += "# HELP vllm:nixl_num_failed_transfers_total Number of failed NIXL KV Cache transfers, including"
    text += " handshake and notification failures. NOTE: KV expiry is tracked separately in"
    text += " vllm:nixl_num_kv_expired_reqs.\n"
    text += "# TYPE vllm:nixl_num_failed_transfers_total counter\n"
    for e, (*_head, failed) in engines.items():
        text += f"vllm:nixl_num_failed_transfers_total{{{labels[e]}}} {failed}.0\n"
    return text


def test_the_decode_fixture_gives_the_new_counters_and_no_rates_on_a_first_scrape():
    entries = _entries(DECODE.read_text())
    assert set(entries) == {"0", ""}
    engine = entries["0"]
    assert engine["prompt_tokens_computed_total"] == 48.0
    assert engine["prompt_tokens_local_cache_total"] == 512.0
    assert engine["prompt_tokens_transferred_total"] == 23552.0
    assert engine["prompt_tokens_total"] == 48 + 512 + 23552  # vLLM: the sources add up to the total
    assert engine["kv_transfer_bytes_total"] == 50331648.0  # _sum of the bytes histogram, not a bucket
    assert engine["kv_transfers_total"] == 24.0 and engine["kv_transfers_failed_total"] == 1.0
    assert engine["up"] == 1 and engine["num_requests_running"] == 7.0
    assert not set(RATES) & set(engine)  # a rate needs a previous scrape
    assert "router_requests_total" not in engine
    assert {k: entries[""][k] for k in COUNTS} == {k: engine[k] for k in COUNTS}  # one engine: its sum is itself
    for entry in entries.values():
        assert all(lookup(WORKER, n) is not None and lookup(WORKER, n).holds(v) for n, v in entry.items())


def test_the_nixl_histograms_are_read_as_counters_not_as_latencies():
    [snapshot] = parse_vllm_metrics(DECODE.read_text()).values()
    assert snapshot.histograms == {}  # nixl_xfer_time_seconds is no request latency of LATENCY_HISTOGRAMS


def test_a_second_scrape_gives_rates_per_engine_and_summed():
    metrics = VllmMetrics("w1")
    _entries(_decode_dump({"0": (10, 0, 1000, 4e6, 2, 0), "1": (20, 0, 3000, 8e6, 4, 0)}), now=10.0, metrics=metrics)
    later = _entries(
        _decode_dump({"0": (30, 100, 5000, 12e6, 6, 1), "1": (20, 0, 9000, 20e6, 10, 0)}), now=12.0, metrics=metrics
    )
    assert later["0"]["prompt_tokens_computed_per_s"] == 10.0 and later["1"]["prompt_tokens_computed_per_s"] == 0.0
    assert later["0"]["prompt_tokens_transferred_per_s"] == 2000.0
    assert later["1"]["prompt_tokens_transferred_per_s"] == 3000.0
    assert later["0"]["kv_transfer_bytes_per_s"] == 4e6 and later["1"]["kv_transfer_bytes_per_s"] == 6e6
    total = later[""]
    assert total["engines"] == 2
    assert total["prompt_tokens_computed_per_s"] == 10.0 and total["prompt_tokens_transferred_per_s"] == 5000.0
    assert total["kv_transfer_bytes_per_s"] == 10e6
    assert total["prompt_tokens_transferred_total"] == 14000.0 and total["prompt_tokens_local_cache_total"] == 100.0
    assert total["kv_transfer_bytes_total"] == 32e6
    assert total["kv_transfers_total"] == 16.0 and total["kv_transfers_failed_total"] == 1.0


def test_two_engines_of_the_fixture_format_sum():
    entries = _entries(_decode_dump({"0": (48, 512, 23552, 50331648, 24, 1), "1": (2, 0, 448, 1048576, 1, 0)}))
    assert set(entries) == {"0", "1", ""}
    assert entries[""]["prompt_tokens_transferred_total"] == 24000.0
    assert entries[""]["prompt_tokens_computed_total"] == 50.0
    assert entries[""]["kv_transfer_bytes_total"] == 50331648 + 1048576
    assert entries[""]["kv_transfers_total"] == 25.0 and entries[""]["kv_transfers_failed_total"] == 1.0


def test_a_restarted_server_gives_its_new_counters_and_no_negative_rates():
    metrics = VllmMetrics("w1")
    _entries(_decode_dump({"0": (500, 0, 90000, 400e6, 80, 3)}), now=1.0, metrics=metrics)
    after = _entries(_decode_dump({"0": (2, 0, 300, 1e6, 1, 0)}), now=2.0, metrics=metrics)["0"]
    assert not set(RATES) & set(after)
    assert after["kv_transfer_bytes_total"] == 1e6 and after["kv_transfers_failed_total"] == 0.0
    again = _entries(_decode_dump({"0": (4, 0, 700, 3e6, 2, 0)}), now=3.0, metrics=metrics)["0"]
    assert again["kv_transfer_bytes_per_s"] == 2e6 and again["prompt_tokens_transferred_per_s"] == 400.0


def test_a_source_vllm_may_add_later_is_not_read():
    text = (
        "# TYPE vllm:prompt_tokens_by_source_total counter\n"
        f'vllm:prompt_tokens_by_source_total{{engine="0",model_name="{MODEL}",source="local_compute"}} 5.0\n'
        f'vllm:prompt_tokens_by_source_total{{engine="0",model_name="{MODEL}",source="host_offload"}} 7.0\n'
        f'vllm:prompt_tokens_by_source_total{{engine="1",model_name="{MODEL}",source="host_offload"}} 7.0\n'
    )
    entries = _entries(text)
    assert set(entries) == {"0", ""}  # engine 1 said nothing meshdeck reads
    assert entries["0"]["prompt_tokens_computed_total"] == 5.0
    assert "prompt_tokens_transferred_total" not in entries["0"]


@pytest.mark.parametrize("path", AGENT_DUMPS, ids=lambda p: p.name)
def test_a_server_without_disaggregation_metrics_emits_none_of_them(path):
    metrics = VllmMetrics("w1")
    for now in (1.0, 2.0):
        entries = _entries(path.read_text(), now=now, metrics=metrics)
        for entry in entries.values():
            assert not set(NEW) & set(entry)


# vllm-router (vllm-project/router, Rust) renders its metrics with the metrics-exporter-prometheus crate:
# HELP/TYPE per family, a blank line after each, no `engine` label. Written by hand in that format: the
# metric names and help texts are those in vllm_router_rs.abi3.so of vllm-router 0.1.17 (`strings`), the
# `worker` label is the router's; the other labels, the values and the worker URLs are made up.
ROUTER = """\
# HELP vllm_router_requests_total Total number of requests by route and method
# TYPE vllm_router_requests_total counter
vllm_router_requests_total{route="/v1/chat/completions",method="POST"} 42

# HELP vllm_router_processed_requests_total Total requests processed by each worker
# TYPE vllm_router_processed_requests_total counter
vllm_router_processed_requests_total{worker="http://10.0.0.11:8100"} 12
vllm_router_processed_requests_total{worker="http://10.0.0.12:8200"} 30

# HELP vllm_router_active_workers Number of currently active workers
# TYPE vllm_router_active_workers gauge
vllm_router_active_workers 2

# HELP vllm_router_running_requests Number of running requests per worker
# TYPE vllm_router_running_requests gauge
vllm_router_running_requests{worker="http://10.0.0.11:8100"} 1
vllm_router_running_requests{worker="http://10.0.0.12:8200"} 3

# HELP vllm_router_generate_duration_seconds Generate request duration
# TYPE vllm_router_generate_duration_seconds histogram
vllm_router_generate_duration_seconds_bucket{route="/v1/chat/completions",le="0.5"} 10
vllm_router_generate_duration_seconds_bucket{route="/v1/chat/completions",le="1"} 40
vllm_router_generate_duration_seconds_bucket{route="/v1/chat/completions",le="+Inf"} 42
vllm_router_generate_duration_seconds_sum{route="/v1/chat/completions"} 31.5
vllm_router_generate_duration_seconds_count{route="/v1/chat/completions"} 42

"""


def test_a_router_scrape_is_up_with_its_requests_summed_over_workers():
    loop = ScrapeLoop("router", "http://127.0.0.1:29000/metrics", 1.0, fetcher=lambda _url, _timeout: ROUTER)
    [entry] = loop.scrape_once()
    assert loop.error is None and entry.engine == ""
    assert dict(entry.metrics) == {"up": 1, "router_requests_total": 42.0}


def test_a_router_that_has_routed_nothing_yet_is_up():
    quiet = "# HELP vllm_router_active_workers Number of currently active workers\n"
    quiet += "# TYPE vllm_router_active_workers gauge\nvllm_router_active_workers 2\n\n"
    for body in (quiet, ""):
        loop = ScrapeLoop("router", "http://127.0.0.1:29000/metrics", 1.0, fetcher=lambda _u, _t, b=body: b)
        [entry] = loop.scrape_once()
        assert loop.error is None and (entry.engine, dict(entry.metrics)) == ("", {"up": 1})


REAL = FIXTURES / "disaggregated"  # real captures of one prefill + one decode engine and the router (SOURCES.md)


def test_the_real_captures_read_as_the_handoff_happened() -> None:
    decode = _entries((REAL / "decode_metrics.txt").read_text())[""]
    prefill = _entries((REAL / "prefill_metrics.txt").read_text())[""]
    router = _entries((REAL / "router_metrics.txt").read_text())[""]
    # decode computed no prompt token itself: all 241 came over NIXL, 1,179,648 bytes in 4 transfers
    assert (decode["prompt_tokens_computed_total"], decode["prompt_tokens_transferred_total"]) == (0.0, 241.0)
    assert (decode["kv_transfer_bytes_total"], decode["kv_transfers_total"]) == (1179648.0, 4.0)
    assert decode["kv_transfers_failed_total"] == 0.0
    assert (prefill["prompt_tokens_computed_total"], prefill["prompt_tokens_transferred_total"]) == (241.0, 0.0)
    assert router["up"] == 1 and router["router_requests_total"] == 8.0  # 4 to prefill + 4 to decode
