"""`hosts add NAME TARGET --accept-new` (README's word): the host is stored, then probed once as `hosts probe NAME
--accept-new` does — its unknown host key accepted and saved (trust on first use), the agent uploaded, the server's
report printed. Without the flag `add` connects to nothing; when the probe fails the host stays added."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from meshdeck.cli import main
from meshdeck.remote.errors import ConnectError
from meshdeck.remote.hostkeys import HostKeyInfo
from meshdeck.services import hosts as host_service
from meshdeck.services.hosts import ProbeReport
from meshdeck_agent.wire_inventory import Inventory

KEY = HostKeyInfo("[10.0.0.5]:2222", "ssh-ed25519", "SHA256:abc", "AAAA")


def _report() -> ProbeReport:
    return ProbeReport(
        target="ubuntu@10.0.0.5", route="ubuntu@10.0.0.5:2222", host_key="ssh-ed25519 SHA256:abc", auth="publickey",
        python="/usr/bin/python3", python_version="3.11.4", machine="x86_64", agent_path="/a.pyz", uploaded=True,
        agent_version="0.2.0", protocol=1, seconds=1.0,
        inventory=Inventory.from_wire({"hostname": "gpu-a", "gpus": [], "nics": []}),
    )  # fmt: skip


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every probe made, with what the host-key prompt answered for an unknown key."""
    made: list[dict[str, Any]] = []

    def probe(target: str, **kwargs: Any) -> ProbeReport:
        made.append({"target": target, "port": kwargs["port"], "accepted": kwargs["host_key_prompt"](KEY)})
        return _report()

    monkeypatch.setattr(host_service, "probe", probe)
    return made


def test_add_with_accept_new_stores_the_host_then_pins_its_key_and_probes_it(capsys, tmp_path: Path, probes) -> None:
    db = str(tmp_path / "m.db")
    code = main(["--db", db, "hosts", "add", "gpu-a", "ubuntu@10.0.0.5", "-p", "2222", "--accept-new"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert probes == [{"target": "ubuntu@10.0.0.5", "port": 2222, "accepted": True}]  # the stored host's settings
    assert out.startswith("added gpu-a: ubuntu@10.0.0.5 port 2222\ngpu-a (ubuntu@10.0.0.5:2222)\n")
    assert err == "meshdeck: accepted new host key for [10.0.0.5]:2222: ssh-ed25519 SHA256:abc\n"


def test_add_without_accept_new_connects_to_nothing(capsys, tmp_path: Path, probes) -> None:
    assert main(["--db", str(tmp_path / "m.db"), "hosts", "add", "gpu-a", "10.0.0.5"]) == 0
    assert probes == [] and capsys.readouterr().out == "added gpu-a: 10.0.0.5\n"


def test_a_failed_first_probe_leaves_the_host_added_and_says_how_to_try_again(
    capsys, tmp_path: Path, monkeypatch
) -> None:
    def unreachable(target: str, **kwargs: Any) -> ProbeReport:
        raise ConnectError("10.0.0.5:22: unreachable (connection refused)")

    monkeypatch.setattr(host_service, "probe", unreachable)
    db = str(tmp_path / "m.db")
    assert main(["--db", db, "hosts", "add", "gpu-a", "10.0.0.5", "--accept-new"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "meshdeck: error: 10.0.0.5:22: unreachable (connection refused)",
        "meshdeck: gpu-a stays added; once it is reachable run `meshdeck hosts probe gpu-a --accept-new`",
    ]
    assert main(["--db", db, "hosts", "list", "--json"]) == 0
    assert [h["name"] for h in json.loads(capsys.readouterr().out)] == ["gpu-a"]


def test_probe_help_names_where_the_agent_really_comes_from(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["hosts", "probe", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "default: $MESHDECK_AGENT_PYZ, else the bundled one" in out and "never a dist/ one" in out
    assert "default: dist/" not in out
