"""A local host added with a Prometheus exporter address (FleetService.add_local, the real agent as a
subprocess, `--simulate 1xH200`): its agent serves meshdeck's GPU metrics there over HTTP, as Prometheus
would scrape them. A host whose agent was already running with another address connects all the same and
its reason says so (a running agent keeps its own settings)."""

from __future__ import annotations

import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from meshdeck.remote.events import InventoryReceived
from meshdeck.services.fleet import FleetService
from prometheus_client.parser import text_string_to_metric_families
from remote_agent_fixtures import local_fleet, short_temp_dir
from remote_fake_agent import Recorder  # tests/fakes is on sys.path (tests/conftest.py)
from sshd import free_port

pytestmark = pytest.mark.slow


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = short_temp_dir("mdx-")  # agent sockets need short paths
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def fleet(tmp_path: Path, short_dir: Path) -> Iterator[FleetService]:
    with local_fleet(tmp_path, short_dir) as service:
        yield service


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, from the exporter's /metrics, parsed as Prometheus does."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        assert reply.status == 200
        text = reply.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_a_local_host_added_with_an_exporter_serves_its_gpu_metrics_over_http(fleet: FleetService, short_dir: Path):
    port = free_port()
    got = Recorder()
    fleet.subscribe(got)
    socket_path, state = str(short_dir / "a.sock"), str(short_dir / "a")
    fleet.add_local(
        "gpu-a", simulate="1xH200", socket=socket_path, state_dir=state, interval_s=0.2, prometheus=f"127.0.0.1:{port}"
    )
    got.wait_for(lambda: len(got.seqs("gpu-a")) >= 3, timeout=120)
    assert fleet.status("gpu-a").reason == ""  # the agent runs as asked
    inventory = next(e.inventory for e in got.events if isinstance(e, InventoryReceived))
    gpu = inventory.gpus[0]
    metrics = scrape(port)
    labels = (("gpu", "0"), ("uuid", gpu.uuid or ""))
    assert metrics[("meshdeck_gpu_memory_total_bytes", labels)] == gpu.memory_total_bytes
    assert 0 <= metrics[("meshdeck_gpu_utilization_pct", labels)] <= 100
    assert metrics[("meshdeck_gpu_power_w", labels)] > 0
    assert metrics[("meshdeck_sample_seq", ())] >= 1
    info = [key for key in metrics if key[0] == "meshdeck_agent_info"]
    assert len(info) == 1 and ("simulated", "true") in info[0][1]

    # The same host set to another address while its agent runs: the agent keeps its own, and says so.
    fleet.remove_host("gpu-a")  # the daemon keeps running
    other = free_port()
    fleet.add_local(
        "gpu-a", simulate="1xH200", socket=socket_path, state_dir=state, interval_s=0.2, prometheus=f"127.0.0.1:{other}"
    )
    got.wait_for(lambda: fleet.status("gpu-a").state == "connected", timeout=120)
    assert fleet.status("gpu-a").reason.startswith(
        f"Prometheus exporter on 127.0.0.1:{port}, not on 127.0.0.1:{other}: the agent was already running"
    )
    assert ("meshdeck_gpu_memory_total_bytes", labels) in scrape(port)  # still where it was started
