"""A running agent keeps the settings it was started with: when its hello says its Prometheus exporter is off,
elsewhere or failed while this host asks for another, the host's reason says so (kept while connected,
degraded and back) instead of the difference being silently ignored."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from meshdeck.remote.connectors import AgentOptions
from meshdeck.remote.daemon_settings import exporter_note
from meshdeck.remote.supervisor import Backoff, HostSupervisor, SupervisorSettings
from meshdeck_agent.protocol import DaemonSettings, Hello
from remote_fake_agent import FakeConnector, Recorder

ASKED = "10.0.0.5:9400"


def _hello(daemon: DaemonSettings | None, agent: str = "0.9.0") -> Hello:
    return Hello(protocol=1, agent=agent, epoch="e1", daemon=daemon)


@pytest.mark.parametrize(
    ("asked", "daemon"),
    [
        (ASKED, DaemonSettings(prometheus=ASKED)),
        (None, DaemonSettings()),
        ("[::1]:9400", DaemonSettings(prometheus="[::1]:9400")),
        (None, None),  # an older agent, nothing asked: nothing to say
    ],
)
def test_an_agent_running_as_asked_gets_no_note(asked: str | None, daemon: DaemonSettings | None) -> None:
    assert exporter_note(asked, _hello(daemon)) == ""


def test_an_agent_started_earlier_without_an_exporter_is_named_with_the_address_asked_and_the_way_out() -> None:
    note = exporter_note(ASKED, _hello(DaemonSettings()))
    assert note == (
        "Prometheus exporter off, not on 10.0.0.5:9400: the agent was already running, started without one, "
        "and a running agent keeps its own settings; restart the agent to apply this host's (its workers keep running)"
    )


def test_an_agent_exporting_elsewhere_names_both_addresses() -> None:
    note = exporter_note(ASKED, _hello(DaemonSettings(prometheus="127.0.0.1:9500")))
    assert note.startswith("Prometheus exporter on 127.0.0.1:9500, not on 10.0.0.5:9400: the agent was already running")


def test_an_exporter_this_host_does_not_ask_for_is_said_too() -> None:
    note = exporter_note(None, _hello(DaemonSettings(prometheus="127.0.0.1:9500")))
    assert note.startswith("Prometheus exporter on 127.0.0.1:9500, which this host's settings do not ask for:")


def test_an_exporter_that_could_not_listen_says_why_escaped() -> None:
    error = "cannot listen on 10.0.0.5:9400: Address already in use\x1b[2J"
    note = exporter_note(ASKED, _hello(DaemonSettings(prometheus_error=error)))
    assert note == "Prometheus exporter not running: cannot listen on 10.0.0.5:9400: Address already in use\\x1b[2J"


def test_an_agent_that_does_not_report_it_is_said_to_be_unknown() -> None:
    note = exporter_note(ASKED, _hello(None, agent="0.8.0"))
    assert note == "Prometheus exporter asked on 10.0.0.5:9400: agent 0.8.0 does not say whether it runs one"


QUICK = SupervisorSettings(
    hello_timeout_s=10, call_timeout_s=10, stall_after_s=0.5, backoff=Backoff(initial_s=0.05, max_s=0.2)
)


@contextmanager
def _supervised(daemon: dict[str, Any]) -> Iterator[tuple[HostSupervisor, FakeConnector, Recorder]]:
    """A supervisor of a fake agent whose hello says `daemon`, reached by an attach asked for ASKED."""
    connector = FakeConnector(daemon=daemon, interval_s=0.1)  # degraded after stall_after_s, 0.5 s
    connector.options = AgentOptions(prometheus=ASKED)
    recorder = Recorder()
    supervisor = HostSupervisor("gpu-a", connector, recorder, settings=QUICK, rng=random.Random(7))
    supervisor.start()
    try:
        recorder.wait_for(lambda: supervisor.state == "connected")
        yield supervisor, connector, recorder
    finally:
        supervisor.stop()
        connector.close_all()


def test_the_host_reason_carries_the_note_while_connected_degraded_and_back() -> None:
    with _supervised({"prometheus": None}) as (supervisor, connector, recorder):
        assert supervisor.reason.startswith("Prometheus exporter off, not on 10.0.0.5:9400")
        recorder.wait_for(lambda: supervisor.state == "degraded")  # no samples for stall_after_s
        assert supervisor.reason.startswith("no samples")
        connector.agent.emit(1)
        recorder.wait_for(lambda: len(recorder.seqs()) == 1 and supervisor.state == "connected")
        assert supervisor.reason.startswith("Prometheus exporter off, not on 10.0.0.5:9400")
        assert supervisor.daemon == DaemonSettings()


def test_a_host_whose_agent_runs_as_asked_connects_with_no_reason() -> None:
    with _supervised({"prometheus": ASKED}) as (supervisor, _connector, _recorder):
        assert supervisor.reason == "" and supervisor.daemon == DaemonSettings(prometheus=ASKED)
