"""Property tests of the vLLM /metrics scraper: whatever text a server returns (arbitrary, or a recorded
dump with lines cut, repeated, corrupted or spliced), parsing raises nothing but ValueError (its
documented error), turning snapshots into sample entries raises nothing, and a scrape loop survives it.
A body past the size cap is refused without being read whole."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from meshdeck_agent import scrape
from meshdeck_agent.metric_registry import WORKER, lookup
from meshdeck_agent.scrape import ScrapeLoop, VllmMetrics, parse_vllm_metrics
from meshdeck_agent.wire_sample import WorkerSample

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "agent"
DUMPS = [path.read_text() for path in sorted(FIXTURES.glob("vllm_metrics_*.txt"))]
FUZZ = settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])

# pieces of exposition text that make a mutation meaningful to the parser
TOKENS = [
    "# TYPE ",
    "# HELP ",
    " counter\n",
    " histogram\n",
    " gauge\n",
    "_bucket",
    "_sum",
    "_count",
    "_total",
    '{le="',
    '{engine="',
    '",',
    '"}',
    "}",
    "{",
    "=",
    " ",
    "\n",
    "+Inf",
    "NaN",
    "-1",
    "1e308",
    "1e999",
    "0x10",
    "\\",
    '"',
    "vllm:cache_config_info",
    'num_gpu_blocks="',
    'block_size="',
    "vllm:kv_cache_usage_perc",
    "vllm:time_to_first_token_seconds",
    "\x00",
    "\u00e9",
]


@st.composite
def mutated_dumps(draw: st.DrawFn) -> str:
    """A recorded dump after a few edits: a slice deleted, duplicated or replaced by tokens or text."""
    text = draw(st.sampled_from(DUMPS))
    for _ in range(draw(st.integers(1, 4))):
        start = draw(st.integers(0, len(text)))
        end = draw(st.integers(start, min(len(text), start + 80)))
        edit = draw(st.sampled_from(["delete", "duplicate", "tokens", "text", "lines"]))
        if edit == "delete":
            text = text[:start] + text[end:]
        elif edit == "duplicate":
            text = text[:end] + text[start:end] + text[end:]
        elif edit == "tokens":
            text = text[:start] + "".join(draw(st.lists(st.sampled_from(TOKENS), max_size=6))) + text[end:]
        elif edit == "text":
            text = text[:start] + draw(st.text(max_size=20)) + text[end:]
        else:
            lines = text.splitlines(keepends=True)
            text = "".join(draw(st.permutations(lines))[: draw(st.integers(0, len(lines)))])
    return text


def _parsed_or_refused(text: str) -> dict | None:
    try:
        return parse_vllm_metrics(text)
    except ValueError:
        return None


@FUZZ
@given(st.text(max_size=400))
def test_arbitrary_text_parses_or_raises_value_error(text):
    _parsed_or_refused(text)


@FUZZ
@given(st.lists(mutated_dumps(), min_size=1, max_size=3))
def test_mutated_recorded_dumps_parse_or_raise_value_error_and_become_entries(texts):
    metrics = VllmMetrics("w1")
    for now, text in enumerate(texts, start=1):
        engines = _parsed_or_refused(text)
        if engines is None:
            continue
        entries = metrics.update(float(now), engines)
        assert all(isinstance(entry, WorkerSample) and entry.id == "w1" for entry in entries)
        for entry in entries:  # every name registered, every value within its range: garbage never rides the wire
            assert all(lookup(WORKER, n) is not None and lookup(WORKER, n).holds(v) for n, v in entry.metrics), entry
        assert len(entries) <= scrape.MAX_ENGINES + 1
        assert all(len(entry.engine) <= scrape.MAX_ENGINE_LABEL_CHARS for entry in entries)


@FUZZ
@given(st.lists(st.one_of(mutated_dumps(), st.text(max_size=200)), min_size=1, max_size=3))
def test_a_scrape_loop_survives_any_body_and_says_when_it_could_not_read_one(texts):
    bodies = iter(texts)
    loop = ScrapeLoop("w1", "http://127.0.0.1:9/metrics", 1.0, fetcher=lambda _url, _timeout: next(bodies))
    for _ in texts:
        entries = loop.scrape_once()  # a body read with nothing of vLLM's in it is one entry: up
        assert all(entry.id == "w1" for entry in entries)
        if loop.error is not None:
            assert entries == [WorkerSample("w1", "", (("up", 0),), loop.error)]


class _Endless(http.server.BaseHTTPRequestHandler):
    """Serves a /metrics body of `size` bytes (without Content-Length) and counts what it wrote."""

    size = 100 * 1024 * 1024
    written = 0

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        line = b'vllm:num_requests_running{engine="0"} 1.0\n' * 1024
        try:
            while type(self).written < self.size:
                self.wfile.write(line)
                type(self).written += len(line)
        except OSError:
            pass  # the scraper hung up: what we want

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def endless_server():
    _Endless.written = 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Endless)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


def test_a_100_mb_metrics_body_is_refused_without_reading_it_whole(endless_server):
    with pytest.raises(ValueError, match="larger than"):
        scrape.fetch(endless_server, 10.0)
    assert _Endless.written < 3 * scrape.MAX_METRICS_BYTES  # what was read, plus the sockets' buffers


def test_a_metrics_body_within_the_cap_is_read_whole(endless_server):
    _Endless.size = 256 * 1024
    try:
        text = scrape.fetch(endless_server, 10.0)
    finally:
        _Endless.size = 100 * 1024 * 1024
    assert len(text) == _Endless.written and parse_vllm_metrics(text)["0"].value("num_requests_running") == 1.0


def test_a_scrape_error_repeats_at_most_a_few_hundred_characters_of_the_body():
    """The parser's error quotes the bad line; it rides in every sample, so a 4 MB line made the sample
    larger than a wire line may be (the client could never read past it)."""
    loop = ScrapeLoop("w1", "http://127.0.0.1:9/metrics", 1.0, fetcher=lambda _url, _timeout: "x{" * 2_000_000)
    [entry] = loop.scrape_once()
    assert dict(entry.metrics) == {"up": 0} and loop.error is not None
    assert len(entry.error) <= 400


def _one_response(raw: bytes) -> str:
    """A server that answers one request with `raw` bytes, then closes; returns its URL."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def answer() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(raw)
        listener.close()

    threading.Thread(target=answer, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}/metrics"


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 abc\r\n\r\n",
        b"garbage\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nvllm:num_requests_running 1\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"X-Pad: y\r\n" * 200 + b"\r\n",
        b"",
    ],
    ids=["bad-status", "no-status", "short-body", "bad-chunk", "too-many-headers", "closed"],
)
def test_a_broken_http_answer_is_a_failed_scrape_not_a_dead_scrape_thread(raw):
    loop = ScrapeLoop("w1", _one_response(raw), 1.0)
    [entry] = loop.scrape_once()
    assert dict(entry.metrics) == {"up": 0} and entry.error.startswith("http://127.0.0.1:")


def test_a_scrape_that_raises_unexpectedly_is_logged_and_the_loop_goes_on(caplog):
    answers = iter([RuntimeError("a bug"), 'vllm:num_requests_running{engine="0"} 2\n'])
    scraped = threading.Event()

    def fetcher(_url: str, _timeout: float) -> str:
        answer = next(answers, 'vllm:num_requests_running{engine="0"} 2\n')
        if isinstance(answer, Exception):
            raise answer
        scraped.set()
        return answer

    loop = ScrapeLoop("w1", "http://127.0.0.1:9/metrics", 0.05, fetcher=fetcher)
    loop.start()
    try:
        assert scraped.wait(timeout=30)
    finally:
        loop.stop()
    assert any("scraping http://127.0.0.1:9/metrics failed" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "text",
    [
        "".join(f'vllm:num_requests_running{{engine="{n}"}} 1\n' for n in range(scrape.MAX_ENGINES + 1)),
        'vllm:num_requests_running{engine="' + "e" * 100_000 + '"} 1\n',
    ],
    ids=["too-many-engines", "huge-engine-label"],
)
def test_a_body_whose_engines_would_not_fit_a_sample_is_refused(text):
    """Each engine label becomes a sample entry: 100,000 of them, or one 100 KB label, made samples
    larger than a wire line may be."""
    with pytest.raises(ValueError, match="engine"):
        parse_vllm_metrics(text)
