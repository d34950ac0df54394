"""History read from a real Prometheus (Debian's `prometheus` binary) scraping two real agents' exporters.

Two `meshdeck-agent serve --simulate 2xH200 --prometheus 127.0.0.1:PORT` daemons and one `prometheus`
(its own config, scrape_interval 1s, a temporary storage dir, a free loopback port) are started and
stopped by the test. What the history source reads back is checked against the samples the agents
themselves produced (their rings, read over their sockets): the same hosts, the same GPUs and NVLink
links, every value one the agent exported, the times inside the range asked.

`make test` installs the package (system-deps), so under CI (CI=true) a missing binary is a failure;
elsewhere the test skips saying how to install it.
"""

from __future__ import annotations

import csv
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from integration.agent.agent_harness import Client, agent_env, wait_for
from meshdeck import cli
from meshdeck.services.prometheus_history import PrometheusSource, chart, prometheus_hosts
from meshdeck_agent.metric_registry import GPU_METRICS
from meshdeck_agent.wire_sample import Sample

pytestmark = pytest.mark.slow

HOSTS = {"gpu-a": 1, "gpu-b": 2}  # host -> the simulation's seed (two different machines)
POWER = [m.name for m in GPU_METRICS].index("power_w")
TEMPERATURE = [m.name for m in GPU_METRICS].index("temperature_c")
MEMORY_TOTAL = [m.name for m in GPU_METRICS].index("memory_total_bytes")


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    found = shutil.which("prometheus") or shutil.which("prometheus", path="/usr/bin:/usr/sbin")
    if found:
        return found
    message = "no prometheus binary: `make system-deps` installs Debian's (apt-get install prometheus)"
    if os.environ.get("CI"):
        pytest.fail(f"CI runs the Prometheus history test and `make test` installs the package: {message}")
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def _process(argv: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """`argv` running with its output in `log`; stopped (SIGTERM, then SIGKILL) however the test ends."""
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def fleet(prometheus_binary: str) -> Iterator[dict[str, object]]:
    """Two agents exporting on free ports and a Prometheus scraping both every second; everything is
    stopped and its directory removed afterwards (also when the test fails)."""
    workdir = Path(tempfile.mkdtemp(prefix="mdp-", dir="/tmp"))  # short: agent sockets live here
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, workdir, True)
        sockets, exporters = {}, {}
        for host, seed in HOSTS.items():
            state = workdir / host
            state.mkdir()
            sockets[host] = state / "agent.sock"
            exporters[host] = _free_port()
            argv = [sys.executable, "-m", "meshdeck_agent", "serve", "--socket", str(sockets[host])]
            argv += ["--state-dir", str(state), "--simulate", "2xH200", "--seed", str(seed), "--interval", "1"]
            argv += ["--prometheus", f"127.0.0.1:{exporters[host]}"]
            stack.enter_context(_process(argv, workdir / f"{host}.log", env=agent_env()))
        targets = "\n".join(
            f'      - targets: ["127.0.0.1:{port}"]\n        labels: {{host: "{host}"}}'
            for host, port in exporters.items()
        )
        config = workdir / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            f"scrape_configs:\n  - job_name: meshdeck\n    static_configs:\n{targets}\n"
        )
        port = _free_port()
        argv = [prometheus_binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}"]
        argv += [f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h", "--log.level=warn"]
        server = stack.enter_context(_process(argv, workdir / "prometheus.log"))
        url = f"http://127.0.0.1:{port}"
        ready = wait_for(lambda: server.poll() is not None or _answers(f"{url}/-/ready"), timeout=120, interval=0.2)
        assert ready and server.poll() is None, (workdir / "prometheus.log").read_text()[-2000:]
        yield {"url": url, "sockets": sockets, "workdir": workdir}


def _ring(socket_path: Path) -> list[Sample]:
    """Every sample the agent produced so far (its ring holds hours), decoded as the app decodes them."""
    client = Client.connect(socket_path)
    try:
        reply = client.call("samples.read", {"since_seq": 0, "limit": 100_000})
    finally:
        client.close()
    return [Sample.from_wire(obj) for obj in reply["samples"]]


def _exported(samples: list[Sample], gpu: int, column: int) -> set[float]:
    return {float(s.gpus[gpu].values[column]) for s in samples if s.gpus[gpu].values[column] is not None}


def test_history_read_from_prometheus_is_what_the_two_agents_exported(fleet: dict[str, object]):
    source = PrometheusSource(str(fleet["url"]), timeout_s=10)
    sockets: dict[str, Path] = fleet["sockets"]  # type: ignore[assignment]
    since = time.time()

    def scraped_enough() -> bool:  # both hosts, a few scrapes each
        return all(
            len(ranges) == 2 and all(len(r) >= 6 for r in ranges)
            for ranges in (
                chart(source, host=host, metric="power_w", since=since - 60, until=time.time()) for host in HOSTS
            )
        )

    assert wait_for(scraped_enough, timeout=120, interval=0.5)
    first_scrape = chart(source, host="gpu-b", metric="temperature_c", since=since - 60, until=time.time())[0].ts[0]
    assert prometheus_hosts(source) == sorted(HOSTS)

    until = time.time()
    begin = until - 60
    for host in HOSTS:
        agent = _ring(sockets[host])
        power = chart(source, host=host, metric="power_w", since=begin, until=until)
        assert [(r.series.host, r.series.device, r.series.metric) for r in power] == [
            (host, "gpu0", "power_w"),
            (host, "gpu1", "power_w"),
        ]
        for gpu, series in enumerate(power):
            assert series.tier == "raw" and series.step_s == 1.0 and len(series) >= 5
            assert all(begin <= ts <= until for ts in series.ts)
            assert all(b - a == pytest.approx(1.0) for a, b in zip(series.ts, series.ts[1:], strict=False))
            assert set(series.mean) <= _exported(agent, gpu, POWER), f"{host} gpu{gpu}: a value the agent never had"
        memory = chart(source, host=host, metric="memory_total_bytes", since=begin, until=until)
        assert [set(r.mean) for r in memory] == [_exported(agent, gpu, MEMORY_TOTAL) for gpu in (0, 1)]
        # Two points over two minutes: min / mean / max / count per 120 s step (`*_over_time` on the server).
        (buckets, _) = chart(source, host=host, metric="power_w", since=until - 120, until=until, max_points=2)
        assert buckets.tier == "range" and buckets.step_s == 120.0 and len(buckets) >= 1
        assert all(1 <= n <= 121 for n in buckets.count)
        assert all(
            lo <= mean <= hi for lo, mean, hi in zip(buckets.minimum, buckets.mean, buckets.maximum, strict=True)
        )
        assert set(buckets.minimum) | set(buckets.maximum) <= _exported(agent, 0, POWER)
        links = chart(source, host=host, metric="nvlink_tx_bytes_per_s", since=begin, until=until)
        expected = {f"gpu{g.index}" for g in agent[-1].gpus}
        expected |= {f"gpu{g.index}/nvlink{link}" for g in agent[-1].gpus for link in range(len(g.nvlink_links))}
        assert {r.series.device for r in links} == expected and len(expected) == 2 + 2 * 18

    # The CLI export reads the same series: one row per second per GPU over a closed range of whole seconds.
    start = float(math.ceil(first_scrape)) + 1  # Prometheus holds a value at every step from here
    end = start + 5
    assert wait_for(lambda: time.time() > end + 2, timeout=30)
    out = Path(str(fleet["workdir"])) / "gpu-b.csv"
    argv = ["history", "export", "--source", "prometheus", "--prometheus-url", str(fleet["url"])]
    argv += ["--host", "gpu-b", "--metric", "temperature_c", "--since", str(start), "--until", str(end), "-o", str(out)]
    assert cli.main(argv) == 0
    rows = list(csv.DictReader(out.open()))
    assert {(row["host"], row["metric"], row["unit"]) for row in rows} == {("gpu-b", "temperature_c", "°C")}
    assert sorted(float(row["ts"]) for row in rows if row["device"] == "gpu0") == [start + i for i in range(5)]
    assert len(rows) == 10
    agent_b = _ring(sockets["gpu-b"])
    for gpu in (0, 1):
        values = {float(row["value"]) for row in rows if row["device"] == f"gpu{gpu}"}
        assert values <= _exported(agent_b, gpu, TEMPERATURE)
