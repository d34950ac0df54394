"""`meshdeck launch` with an agent whose `inventory` answer is wrong-shaped: one line naming the host and the
field, exit 2, nothing started — never a traceback. The fleet is scripted; the CLI and services are real."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_fleet import InventoryFleet
from launch_builders import make_profile
from meshdeck.cli import main
from meshdeck.core.errors import InputError
from meshdeck.services.deployments.targets import prepare_launch
from meshdeck_agent.wire_inventory import Inventory

HOSTS = ("gpu-a", "gpu-b")
ETH = {"name": "eth0", "kind": "ethernet", "state": "UP", "addresses": ["10.0.0.1/24"]}
GOOD = {"hostname": "gpu-a", "simulated": False, "gpus": [], "nics": [ETH]}

WRONG_SHAPES = [
    ([GOOD], "inventory"),
    (None, "inventory"),
    ({**GOOD, "gpus": 5}, "inventory.gpus"),
    ({**GOOD, "gpus": [{"index": 0, "memory_total_bytes": "lots"}]}, "inventory.gpus[0].memory_total_bytes"),
    ({**GOOD, "nics": {"eth0": ETH}}, "inventory.nics"),
    ({**GOOD, "nics": [{**ETH, "addresses": "10.0.0.1/24"}]}, "inventory.nics[0].addresses"),
    ({**GOOD, "simulated": "no"}, "inventory.simulated"),
]


def _profile() -> Any:
    return make_profile(engine="torch", hosts=list(HOSTS), gpus_per_node=1, layout={"tensor_parallel": 1, "data_parallel": 2},
                        torch={"script": "collectives"})  # fmt: skip


@pytest.mark.parametrize(("bad", "field"), WRONG_SHAPES)
def test_prepare_launch_names_the_host_and_the_field_of_a_wrong_shaped_inventory(bad: Any, field: str) -> None:
    fleet = InventoryFleet({"gpu-a": GOOD, "gpu-b": bad})
    with pytest.raises(InputError) as caught:
        prepare_launch(_profile(), fleet, addresses={"gpu-a": "10.0.0.1", "gpu-b": "10.0.0.2"}, run_id="r")
    assert caught.value.field == f"host gpu-b: {field}"


@pytest.mark.parametrize(("bad", "field"), WRONG_SHAPES[:4])
def test_launch_command_with_a_wrong_shaped_inventory_is_one_line_and_exit_2(
    capsys, monkeypatch, tmp_path: Path, bad: Any, field: str
) -> None:
    fleet = InventoryFleet({"gpu-a": bad, "gpu-b": GOOD})
    monkeypatch.setattr("meshdeck.commands.launch.FleetService", lambda: fleet)
    monkeypatch.setattr("meshdeck.commands.launch.deploy_hosts.connect", lambda *args: None)
    monkeypatch.setattr(
        "meshdeck.commands.launch.deploy_hosts.addresses_for",
        lambda hosts, db: {"gpu-a": "10.0.0.1", "gpu-b": "10.0.0.2"},
    )
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"name": "job", "model": "m", "engine": "torch", "hosts": list(HOSTS),
                                    "gpus_per_node": 1, "layout": {"data_parallel": 2},
                                    "torch": {"script": "collectives"}}))  # fmt: skip
    code = main(["--db", str(tmp_path / "m.db"), "launch", str(path), "--skip-preflight"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"meshdeck: error: host gpu-a: {field}")
    assert all(method in ("inventory", "checks.route") for _host, method in fleet.calls)


def test_prepare_launch_keeps_the_decoded_inventories() -> None:
    fleet = InventoryFleet({"gpu-a": GOOD, "gpu-b": {**GOOD, "hostname": "gpu-b"}})
    prepared = prepare_launch(_profile(), fleet, addresses={"gpu-a": "10.0.0.1", "gpu-b": "10.0.0.2"}, run_id="r")
    assert prepared.inventories == {h: Inventory.from_wire({**GOOD, "hostname": h}) for h in HOSTS}
    assert not prepared.simulated and prepared.plan.hosts == HOSTS
