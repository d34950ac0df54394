"""A wrong-shaped `inventory` answer is refused where it enters the app, naming the host and the field:
`hosts probe` exits 2 with one line, the host supervisor fails that host (and only that host) with the
reason. The agent here speaks the real protocol; only its inventory is broken."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from meshdeck.cli import main
from meshdeck.remote.connectors import AgentLink
from meshdeck.remote.errors import InventoryInvalid
from meshdeck.remote.events import InventoryReceived
from meshdeck.remote.supervisor import Backoff, HostSupervisor, SupervisorSettings
from meshdeck_agent.wire_inventory import Inventory
from remote_fake_agent import FakeConnector, Recorder

GOOD = {"hostname": "gpu-07", "simulated": True, "gpus": [{"index": 0, "name": "NVIDIA H200"}]}

# (inventory the agent answers, the field the error must name)
WRONG_SHAPES = [
    ([GOOD], "inventory"),  # a list
    (None, "inventory"),  # null
    ({**GOOD, "gpus": 5}, "inventory.gpus"),
    ({**GOOD, "gpus": [{"index": 0, "memory_total_bytes": "lots"}]}, "inventory.gpus[0].memory_total_bytes"),
    ({**GOOD, "gpus": [{"index": 0, "memory_total_bytes": -1}]}, "inventory.gpus[0].memory_total_bytes"),
    ({**GOOD, "nics": [{"name": "eth0", "kind": "ethernet", "rate_gbps": True}]}, "inventory.nics[0].rate_gbps"),
    ({**GOOD, "topology": {"matrix": [["X", "NV18"]]}}, "inventory.topology.matrix[0]"),
    ({**GOOD, "topology": {"matrix": [["X", "NV18"], ["NV18", "X"]]}}, "inventory.topology.matrix"),
    ({**GOOD, "hostname": "x" * 100_000}, "inventory.hostname"),
    ({**GOOD, "cpu": {"numa_nodes": [{"node": 0, "cpus": "0-3"}]}}, "inventory.cpu.numa_nodes[0].cpus"),
]


class ProbeConnector(FakeConnector):
    """A FakeConnector whose links carry the details an SSH probe reports."""

    def open(self, progress: Any) -> AgentLink:
        link = super().open(progress)
        link.details.update(
            route="direct",
            host_key="ssh-ed25519 SHA256:test",
            auth="publickey",
            python="/usr/bin/python3",
            python_version="3.11.7",
            machine="x86_64",
            agent_path="~/.cache/meshdeck/meshdeck-agent.pyz",
            uploaded=False,
        )
        return link


def _probe(capsys, monkeypatch, tmp_path: Path, inventory: Any, *extra: str) -> tuple[int, str, str]:
    connector = ProbeConnector(handlers={"inventory": lambda _params: inventory})  # answers it as given, null too
    monkeypatch.setattr("meshdeck.services.hosts.ssh_connector", lambda *args, **kwargs: connector)
    code = main(["--db", str(tmp_path / "none.db"), "hosts", "probe", "gpu-07", "--timeout", "20", *extra])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("inventory", "field"), WRONG_SHAPES)
def test_probe_of_a_wrong_shaped_inventory_is_one_line_naming_host_and_field(
    capsys, monkeypatch, tmp_path: Path, inventory: Any, field: str
) -> None:
    code, out, err = _probe(capsys, monkeypatch, tmp_path, inventory)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("meshdeck: error: gpu-07: ")
    assert f"{field}:" in err or f"{field} " in err


def test_probe_of_a_good_inventory_prints_it(capsys, monkeypatch, tmp_path: Path) -> None:
    code, out, _ = _probe(capsys, monkeypatch, tmp_path, GOOD)
    assert code == 0 and "gpu-07 [SIMULATED]" in out and "GPU0 NVIDIA H200" in out
    code, out, _ = _probe(capsys, monkeypatch, tmp_path, GOOD, "--json")
    assert code == 0 and json.loads(out)["inventory"] == Inventory.from_wire(GOOD).to_wire()


def _supervise(name: str, connector: FakeConnector, recorder: Recorder) -> HostSupervisor:
    settings = SupervisorSettings(hello_timeout_s=10, call_timeout_s=10, backoff=Backoff(0.05, 2, 0.2))
    supervisor = HostSupervisor(name, connector, recorder, settings=settings)
    supervisor.start()
    return supervisor


def test_a_host_with_a_wrong_shaped_inventory_fails_with_the_field_and_the_others_connect() -> None:
    recorder = Recorder()
    bad = _supervise("gpu-bad", FakeConnector(handlers={"inventory": lambda _params: {**GOOD, "gpus": 5}}), recorder)
    good = _supervise("gpu-good", FakeConnector(inventory=GOOD), recorder)
    try:
        recorder.wait_for(lambda: "failed" in recorder.states("gpu-bad") and "connected" in recorder.states("gpu-good"))
        assert bad.state == "failed" and "gpu-bad" in bad.reason and "inventory.gpus" in bad.reason
        assert isinstance(bad.error, InventoryInvalid) and bad.error.field == "gpus"
        assert bad.inventory is None
        received = [e for e in recorder.events if isinstance(e, InventoryReceived)]
        assert [e.host for e in received] == ["gpu-good"]
        assert received[0].inventory == Inventory.from_wire(GOOD) and good.inventory == received[0].inventory
    finally:
        bad.stop()
        good.stop()
