"""The dashboard says whether what it shows is simulated or real: with the demo's real vLLM beside its
simulated hosts (`meshdeck --demo --real-vllm`), showing only the real host reads REAL, any simulated one
SIMULATED; a console of real hosts only shows no badge."""

from __future__ import annotations

import time

import pytest
from meshdeck.remote.events import SamplesReceived
from meshdeck.services.synthetic_samples import sample_batch
from meshdeck.ui.views.dashboard.view import DashboardView
from wire_samples import wire_samples


@pytest.fixture
def dashboard(qtbot, console_context):
    view = DashboardView(console_context.live)
    qtbot.addWidget(view)
    view.resize(1200, 800)
    view.show()
    return view


def post(context, host: str, *, simulated: bool) -> None:
    samples = wire_samples(5, time.time() - 5, gpus=1)
    for sample in samples:
        sample["simulated"] = simulated
    context.bridge.post(SamplesReceived(host, sample_batch(samples)))


def choose_host(dashboard: DashboardView, host: str | None) -> None:
    dashboard.host_filter.setCurrentIndex(dashboard.host_filter.findData(host) if host else 0)
    dashboard.refresh()


def test_only_the_real_host_shown_beside_simulated_ones_reads_real(qtbot, console_context, dashboard) -> None:
    post(console_context, "demo-a", simulated=True)
    post(console_context, "cpu-a", simulated=False)
    qtbot.waitUntil(lambda: set(dashboard.metrics.hosts) == {"demo-a", "cpu-a"}, timeout=30000)
    dashboard.refresh()
    assert dashboard.simulated_badge.isVisible() and dashboard.simulated_badge.text() == "SIMULATED data"
    choose_host(dashboard, "cpu-a")
    assert dashboard.simulated_badge.isVisible() and dashboard.simulated_badge.text() == "REAL data"
    choose_host(dashboard, "demo-a")
    assert dashboard.simulated_badge.text() == "SIMULATED data"


def test_a_console_of_real_hosts_shows_no_badge(qtbot, console_context, dashboard) -> None:
    post(console_context, "gpu-a", simulated=False)
    qtbot.waitUntil(lambda: dashboard.metrics.hosts == ["gpu-a"] or "gpu-a" in dashboard.metrics.hosts, timeout=30000)
    dashboard.refresh()
    assert not dashboard.simulated_badge.isVisible()
