"""The console's path to a host's GPU processes, end to end: a real agent daemon (simulated 8xH200) running a
meshdeck-named vLLM stand-in, reached through the fleet service (`attach`, hello, the RPC client); the
services' rows name the deployment and part. An agent that predates `processes` is said to be too old."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from integration.agent.agent_harness import InProcessAgent, in_process_agent
from meshdeck.services.fleet import FleetService, FleetSettings
from meshdeck.services.processes import ProcessesUnavailable, fetch_processes
from meshdeck_agent import protocol

pytestmark = pytest.mark.slow
GIB = 1 << 30
NAME = "meshdeck:ds32-0101-ab12:0:vllm-node0"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[FleetService]:
    service = FleetService(FleetSettings(known_hosts=str(tmp_path / "known_hosts")))
    try:
        yield service
    finally:
        service.close()


def _connect(fleet: FleetService, agent: InProcessAgent) -> None:
    fleet.add_local("sim-a", socket=str(agent.socket_path))
    deadline = time.monotonic() + 60
    while fleet.status("sim-a").state != "connected":
        assert time.monotonic() < deadline, fleet.status("sim-a").reason
        time.sleep(0.1)


def test_the_services_list_a_stand_ins_gpus_under_its_deployment(fleet: FleetService) -> None:
    with in_process_agent("8xH200", interval_s=0.25, sim_vllm_startup_s=0.5) as agent:
        client = agent.client()
        argv = ["vllm", "serve", "deepseek-ai/DeepSeek-V3.2", "-tp", "8", "--max-model-len", "16384"]
        client.call("workers.start", {"spec": {"argv": argv, "id": "ds32-0101-ab12.vllm-node0", "name": NAME}})
        client.close()
        _connect(fleet, agent)
        deadline = time.monotonic() + 60
        while len((listing := fetch_processes(fleet, "sim-a")).rows) < 8:
            assert time.monotonic() < deadline, listing
            time.sleep(0.2)
        assert listing.simulated and listing.gpus == tuple(range(8))
        assert [row.gpu for row in listing.rows] == list(range(8))
        assert {(row.deployment, row.part, row.kind_code) for row in listing.rows} == {
            ("ds32-0101-ab12", "vllm-node0", "C")
        }
        assert all(
            row.owner_text == "ds32-0101-ab12 / vllm-node0" and "vllm" in row.command_text for row in listing.rows
        )


def test_an_agent_older_than_the_method_is_too_old_to_list_processes(
    fleet: FleetService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(protocol.METHOD_PARAMS, "processes")  # the daemon answers as one from before it
    with in_process_agent("8xH200", interval_s=0.5) as agent:
        _connect(fleet, agent)
        with pytest.raises(ProcessesUnavailable) as caught:
            fetch_processes(fleet, "sim-a", agent_version=fleet.status("sim-a").agent_version)
    assert caught.value.too_old
    assert caught.value.message.startswith("sim-a: this agent is too old to list processes (meshdeck-agent ")
