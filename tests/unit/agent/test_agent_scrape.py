"""vLLM /metrics scraping with prometheus_client's parser: every recorded dump, old and new names,
engine labels, counters' rates, histogram quantiles, and capacity-weighted KV usage."""

from __future__ import annotations

from pathlib import Path

import pytest
from meshdeck_agent.scrape import ScrapeLoop, VllmMetrics, parse_vllm_metrics, quantile

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "agent"
DUMPS = sorted(FIXTURES.glob("vllm_metrics_*.txt"))


def _entries(text: str, now: float = 1.0, metrics: VllmMetrics | None = None) -> dict[str, dict]:
    metrics = metrics or VllmMetrics("w1")
    return {e.engine: dict(e.metrics) for e in metrics.update(now, parse_vllm_metrics(text))}


# What each recorded dump holds, read off its text: {engine label: {meshdeck key: value}}, the KV capacity
# from vllm:cache_config_info (num_gpu_blocks x block_size) and {engine label: {histogram: {le: count}}}.
E2E_BUCKETS = {
    0.5: 0,
    0.8: 0,
    1.0: 0,
    1.5: 0,
    2.0: 0,
    2.5: 1,
    5.0: 2,
    10.0: 3,
    15.0: 3,
    20.0: 3,
    30.0: 3,
    40.0: 3,
    50.0: 3,
}
DECODE_LES = (15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0, float("inf"))
IDLE = {"num_requests_running": 0.0, "num_requests_waiting": 0.0, "kv_cache_usage_perc": 0.0}
DUMP_CONTENTS = {
    "vllm_metrics_dp2_num_requests_running_two-engines_gaie-issue2950_excerpt.txt": (
        {"0": {"num_requests_running": 0.0}, "1": {"num_requests_running": 0.0}},
        {},
        {},
    ),
    "vllm_metrics_v0-engine_gpu_cache_usage_perc_cache_config_info_qwen3vl-issue55_excerpt.txt": (
        {"": IDLE},
        {"": 2048 * 16},
        {},
    ),
    "vllm_metrics_v0.10.0_engine-label_glm45_prodstack-issue617_excerpt.txt": (
        {
            "0": {
                "prefix_cache_hits_total": 0.0,
                "kv_cache_usage_perc": 9.75010481363281e-06,
                "prefix_cache_queries_total": 32.0,
            }
        },
        {},
        {},
    ),
    "vllm_metrics_v0.10.x_dp2_engine0_e2e-hist_vllm-pr22227_excerpt.txt": ({"0": {}}, {}, {"0": {"e2e": E2E_BUCKETS}}),
    "vllm_metrics_v0.10.x_dp2_engine1_decode-hist_vllm-pr22227_excerpt.txt": (
        {"1": {}},
        {},
        {"1": {"decode": dict.fromkeys(DECODE_LES, 1.0)}},
    ),
    "vllm_metrics_v1-early_gpu_cache_usage_perc_qwen25coder32b_prodstack-issue318_excerpt.txt": ({"": IDLE}, {}, {}),
}


def test_every_recorded_dump_has_its_contents_listed():
    assert sorted(DUMP_CONTENTS) == [p.name for p in DUMPS]


@pytest.mark.parametrize("path", DUMPS, ids=lambda p: p.name)
def test_every_recorded_dump_parses_to_the_engines_values_and_histograms_it_holds(path):
    values, capacities, histograms = DUMP_CONTENTS[path.name]
    engines = parse_vllm_metrics(path.read_text())
    assert set(engines) == set(values)
    for label, snapshot in engines.items():
        assert {key: snapshot.value(key) for key in snapshot.values} == values[label]
        assert snapshot.capacity_tokens == capacities.get(label)
        got = {key: dict(histogram.buckets) for key, (_priority, histogram) in snapshot.histograms.items()}
        assert got == histograms.get(label, {})


def test_new_names_with_engine_label_v0_10():
    entries = _entries(
        (FIXTURES / "vllm_metrics_v0.10.0_engine-label_glm45_prodstack-issue617_excerpt.txt").read_text()
    )
    assert entries["0"]["kv_cache_usage_perc"] == pytest.approx(9.75010481363281e-06)
    assert entries["0"]["prefix_cache_queries_total"] == 32.0 and entries["0"]["prefix_cache_hits_total"] == 0.0
    assert entries[""]["engines"] == 1


def test_old_gpu_cache_usage_name_and_v0_cache_config_capacity():
    entries = _entries(
        (
            FIXTURES / "vllm_metrics_v0-engine_gpu_cache_usage_perc_cache_config_info_qwen3vl-issue55_excerpt.txt"
        ).read_text()
    )
    assert set(entries) == {""}
    assert entries[""]["kv_cache_usage_perc"] == 0.0 and entries[""]["kv_cache_capacity_tokens"] == 2048 * 16
    early = _entries(
        (
            FIXTURES / "vllm_metrics_v1-early_gpu_cache_usage_perc_qwen25coder32b_prodstack-issue318_excerpt.txt"
        ).read_text()
    )
    assert early[""]["num_requests_running"] == 0.0 and "kv_cache_usage_perc" in early[""]


def test_two_dp_engines_are_reported_each_and_summed():
    entries = _entries(
        (FIXTURES / "vllm_metrics_dp2_num_requests_running_two-engines_gaie-issue2950_excerpt.txt").read_text()
    )
    assert set(entries) == {"0", "1", ""} and entries[""]["engines"] == 2


def test_histogram_quantiles_from_a_recorded_bucket_dump():
    entries = _entries((FIXTURES / "vllm_metrics_v0.10.x_dp2_engine0_e2e-hist_vllm-pr22227_excerpt.txt").read_text())
    assert entries["0"]["e2e_p50_s"] == pytest.approx(3.75)  # 1.5th of 3 requests: between 2.5 s (1) and 5 s (2)
    assert "e2e_mean_s" not in entries["0"]  # the excerpt has no _sum/_count: the mean is not told
    decode = _entries((FIXTURES / "vllm_metrics_v0.10.x_dp2_engine1_decode-hist_vllm-pr22227_excerpt.txt").read_text())
    assert decode["1"]["decode_p99_s"] == pytest.approx(14.85)  # one request, the excerpt starts at le=15


def _dump(engines: dict[str, tuple[float, float, int, float]]) -> str:
    """engine -> (kv usage, generation total, num_gpu_blocks, ttft count at <=0.1 s)."""
    text = "# TYPE vllm:kv_cache_usage_perc gauge\n"
    for e, (kv, _, _, _) in engines.items():
        text += f'vllm:kv_cache_usage_perc{{engine="{e}",model_name="m"}} {kv}\n'
    text += "# TYPE vllm:generation_tokens counter\n"
    for e, (_, gen, _, _) in engines.items():
        text += f'vllm:generation_tokens_total{{engine="{e}",model_name="m"}} {gen}\n'
    text += "# TYPE vllm:cache_config_info gauge\n"
    for e, (_, _, blocks, _) in engines.items():
        text += f'vllm:cache_config_info{{block_size="64",engine="{e}",num_gpu_blocks="{blocks}"}} 1.0\n'
    text += "# TYPE vllm:time_to_first_token_seconds histogram\n"
    for e, (_, _, _, fast) in engines.items():
        text += f'vllm:time_to_first_token_seconds_bucket{{engine="{e}",le="0.1",model_name="m"}} {fast}\n'
        text += f'vllm:time_to_first_token_seconds_bucket{{engine="{e}",le="1.0",model_name="m"}} {fast + 10}\n'
        text += f'vllm:time_to_first_token_seconds_bucket{{engine="{e}",le="+Inf",model_name="m"}} {fast + 10}\n'
        text += f'vllm:time_to_first_token_seconds_count{{engine="{e}",model_name="m"}} {fast + 10}\n'
        text += f'vllm:time_to_first_token_seconds_sum{{engine="{e}",model_name="m"}} {fast * 0.05 + 5}\n'
    return text


def test_rates_and_windowed_quantiles_come_from_deltas_between_scrapes():
    metrics = VllmMetrics("w1")
    _entries(_dump({"0": (0.1, 1000, 100, 0), "1": (0.1, 500, 100, 0)}), now=10.0, metrics=metrics)
    later = _entries(_dump({"0": (0.2, 3000, 100, 90), "1": (0.4, 1500, 100, 0)}), now=12.0, metrics=metrics)
    assert later["0"]["generation_tokens_per_s"] == 1000.0 and later["1"]["generation_tokens_per_s"] == 500.0
    assert later[""]["generation_tokens_per_s"] == 1500.0
    assert later["0"]["ttft_p50_s"] < 0.1  # 90 new fast requests in engine 0's window
    assert later[""]["ttft_p50_s"] < 0.1 and later[""]["ttft_p99_s"] == pytest.approx(0.099)


def test_kv_usage_across_engines_is_weighted_by_capacity():
    entries = _entries(_dump({"0": (0.9, 0, 300, 0), "1": (0.1, 0, 100, 0)}))
    assert entries[""]["kv_cache_usage_perc"] == pytest.approx((0.9 * 300 + 0.1 * 100) / 400)
    assert entries[""]["kv_cache_capacity_tokens"] == 400 * 64


def test_a_server_restart_does_not_produce_negative_rates():
    metrics = VllmMetrics("w1")
    _entries(_dump({"0": (0.1, 5000, 100, 0)}), now=1.0, metrics=metrics)
    after = _entries(_dump({"0": (0.1, 10, 100, 0)}), now=2.0, metrics=metrics)
    assert "generation_tokens_per_s" not in after["0"]


def test_quantile_interpolates_like_histogram_quantile():
    assert quantile(0.5, {0.1: 0, 1.0: 10, float("inf"): 10}) == pytest.approx(0.55)
    assert quantile(0.99, {0.1: 5, float("inf"): 10}) == 0.1
    assert quantile(0.5, {}) is None and quantile(0.5, {1.0: 0}) is None


def test_a_failing_scrape_reports_up_zero_with_the_error():
    def refuse(url: str, timeout: float) -> str:
        raise OSError("connection refused")

    loop = ScrapeLoop("w9", "http://127.0.0.1:1/metrics", 1.0, fetcher=refuse)
    [entry] = loop.scrape_once()
    assert dict(entry.metrics) == {"up": 0} and "connection refused" in entry.error
    assert loop.latest(max_age_s=10) == [entry]
