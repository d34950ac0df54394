"""`meshdeck hosts add|list|remove` against a temporary database, and input errors as one line + exit 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from meshdeck.cli import main
from meshdeck.commands.hosts import render_probe
from meshdeck.services.hosts import ProbeReport
from meshdeck_agent.wire_inventory import Inventory


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "meshdeck.db")


def test_add_list_remove_round_trip(capsys, db: str, tmp_path: Path):
    key = tmp_path / "id_ed25519"
    key.write_text("not read at add time, only checked to exist")
    code, out, _ = _run(capsys, "--db", db, "hosts", "add", "gpu-a", "ubuntu@10.0.0.5", "-p", "2222", "-i", str(key))
    assert code == 0 and out.strip() == "added gpu-a: ubuntu@10.0.0.5 port 2222"
    assert _run(capsys, "--db", db, "hosts", "add", "gpu-b", "10.0.0.6", "-J", "ops@bastion:2200,jump2")[0] == 0
    code, out, _ = _run(capsys, "--db", db, "hosts", "list", "--json")
    listed = json.loads(out)
    assert [(h["name"], h["target"], h["port"], h["jump"]) for h in listed] == [
        ("gpu-a", "ubuntu@10.0.0.5", 2222, None),
        ("gpu-b", "10.0.0.6", None, "ops@bastion:2200,jump2"),
    ]
    assert listed[0]["identity_file"] == str(key)
    code, out, _ = _run(capsys, "--db", db, "hosts", "list")
    header = ["NAME", "STATE", "TARGET", "PORT", "JUMP", "KEY", "SIMULATE", "PROMETHEUS", "SCHEDULER", "NOTE"]
    assert out.splitlines()[0].split() == header
    assert "gpu-b" in out and "ops@bastion:2200,jump2" in out
    assert _run(capsys, "--db", db, "hosts", "remove", "gpu-a") == (0, "removed gpu-a (ubuntu@10.0.0.5)\n", "")
    assert [h["name"] for h in json.loads(_run(capsys, "--db", db, "hosts", "list", "--json")[1])] == ["gpu-b"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["add", "gpu-a", "--", "-oProxyCommand=evil"], "target"),
        (["add", "gpu a", "10.0.0.5"], "host.name"),
        (["add", "gpu-a", "10.0.0.5", "-p", "70000"], "port: 70000 is out of range"),
        (["add", "gpu-a", "10.0.0.5", "-p", "ssh"], "port: 'ssh' is not a port number"),
        (["add", "gpu-a", "10.0.0.5", "-i", "/nonexistent/key"], "identity_file: /nonexistent/key: no such file"),
        (["add", "gpu-a", "10.0.0.5", "--jump=-oops"], "jump"),
        (["remove", "gpu-z"], "no host named 'gpu-z'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, db: str, argv: list[str], message: str):
    code, out, err = _run(capsys, "--db", db, "hosts", *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("meshdeck: error: ") and message in err


def test_duplicate_name_is_refused(capsys, db: str):
    assert _run(capsys, "--db", db, "hosts", "add", "gpu-a", "10.0.0.5")[0] == 0
    code, _, err = _run(capsys, "--db", db, "hosts", "add", "gpu-a", "10.0.0.9")
    assert code == 2 and "already exists" in err


def test_probe_of_a_closed_port_is_one_line_and_exit_2(capsys, tmp_path: Path):
    from sshd import free_port

    port = str(free_port())
    code, out, err = _run(
        capsys,
        "--db",
        str(tmp_path / "none.db"),
        "hosts",
        "probe",
        "127.0.0.1",
        "-p",
        port,
        "--known-hosts",
        str(tmp_path / "kh"),
        "--ssh-config",
        str(tmp_path / "no_config"),
    )
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and f"127.0.0.1:{port}: unreachable" in err
    assert not (tmp_path / "none.db").exists()  # probe never creates a database


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("8xH200;rm -rf ~", "host.simulate: expected COUNTxTYPE such as 8xH200, got '8xH200;rm -rf ~'"),
        ("8xH900", "host.simulate: unknown GPU type 'H900'; known: "),
        ("99xH200", "host.simulate: GPU count must be 1-"),
        ("x", "host.simulate: expected COUNTxTYPE"),
    ],
)
def test_a_bad_simulate_spec_is_refused_at_add_naming_the_field_and_the_form(
    capsys, db: str, spec: str, message: str
) -> None:
    code, out, err = _run(capsys, "--db", db, "hosts", "add", "gpu-s", "10.0.0.7", "--simulate", spec)
    assert code == 2 and out == "" and message in err, err
    assert json.loads(_run(capsys, "--db", db, "hosts", "list", "--json")[1]) == []  # nothing was stored


def test_a_simulate_spec_is_stored_in_its_canonical_form(capsys, db: str) -> None:
    code, out, _ = _run(capsys, "--db", db, "hosts", "add", "gpu-s", "10.0.0.7", "--simulate", " 8 x h200 ")
    assert code == 0 and out.strip() == "added gpu-s: 10.0.0.7 (simulated 8xH200)"
    assert json.loads(_run(capsys, "--db", db, "hosts", "list", "--json")[1])[0]["simulate"] == "8xH200"


RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # all but newline


def test_what_a_server_reports_is_shown_escaped_by_hosts_probe() -> None:
    hostile = "\x1b[2J\x1b[H"
    report = ProbeReport(
        target="gpu-a", route=f"root@gpu-a:22{hostile}", host_key="ssh-ed25519 SHA256:abc", auth="publickey",
        python=f"/usr/bin/python3{hostile}", python_version="3.11.4", machine="x86_64\r", agent_path="/a.pyz",
        uploaded=False, agent_version="0.1.0", protocol=1, seconds=1.0,
        inventory=Inventory.from_wire(
            {"hostname": f"evil{hostile}", "driver": "550\x9b31m", "cuda": "12.4\x07",
             "gpus": [{"index": 0, "name": f"H200{hostile}", "memory_total_bytes": 2**37, "pci_bus_id": "\x08"}],
             "nics": [{"name": f"mlx5_0{hostile}", "kind": "infiniband", "rate_gbps": 400, "state": "UP\r"}]}
        ),
    )  # fmt: skip
    shown = render_probe("gpu-a", report)
    assert not RAW_CONTROL.search(shown), repr(shown)
    assert "evil\\x1b[2J\\x1b[H" in shown and "H200\\x1b[2J" in shown and "driver 550\\x9b31m" in shown
    assert len(shown.splitlines()) == 10  # no line was split or swallowed


def test_hosts_list_escapes_what_is_stored(capsys, db: str) -> None:
    from meshdeck.store.database import open_database
    from meshdeck.store.hosts import HostRecord, add_host

    with open_database(db) as database:  # written by an older meshdeck: C1 controls passed its check
        add_host(database, HostRecord(name="gpu-c", target="10.0.0.8", identity_file="/keys/\x9b2Jid"))
    code, out, _ = _run(capsys, "--db", db, "hosts", "list")
    assert code == 0 and not RAW_CONTROL.search(out) and "/keys/\\x9b2Jid" in out


def test_a_host_keeps_its_exporter_address_and_the_listing_shows_it(capsys, db: str):
    code, out, _ = _run(capsys, "--db", db, "hosts", "add", "gpu-a", "10.0.0.5", "--prometheus", "10.0.0.5:9400")
    assert code == 0 and out.strip() == "added gpu-a: 10.0.0.5 (Prometheus exporter on 10.0.0.5:9400)"
    assert _run(capsys, "--db", db, "hosts", "add", "gpu-b", "10.0.0.6")[0] == 0
    listed = json.loads(_run(capsys, "--db", db, "hosts", "list", "--json")[1])
    assert [(h["name"], h["prometheus"]) for h in listed] == [("gpu-a", "10.0.0.5:9400"), ("gpu-b", None)]
    lines = _run(capsys, "--db", db, "hosts", "list")[1].splitlines()
    assert lines[0].split() == [
        "NAME",
        "STATE",
        "TARGET",
        "PORT",
        "JUMP",
        "KEY",
        "SIMULATE",
        "PROMETHEUS",
        "SCHEDULER",
        "NOTE",
    ]
    assert lines[1].split()[:4] == ["gpu-a", "unknown", "10.0.0.5", "10.0.0.5:9400"]  # nothing recorded of it
    assert lines[2].split()[:3] == ["gpu-b", "unknown", "10.0.0.6"]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (":9400", "expected HOST:PORT"),
        ("10.0.0.5:99999", "the port must be 1-65535"),
        ("10.0.0.5:9400 --simulate 8xH200", "the port must be 1-65535"),
        ("gpu a:9400", "the host is neither an IP address nor a host name"),
    ],
)
def test_a_bad_exporter_address_is_one_line_naming_the_field_and_host(capsys, db: str, value: str, problem: str):
    code, out, err = _run(capsys, "--db", db, "hosts", "add", "gpu-a", "10.0.0.5", f"--prometheus={value}")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("meshdeck: error: host.prometheus: host gpu-a: ") and problem in err
    assert json.loads(_run(capsys, "--db", db, "hosts", "list", "--json")[1]) == []


def test_probe_refuses_a_bad_exporter_address_before_connecting(capsys, tmp_path: Path):
    code, out, err = _run(
        capsys, "--db", str(tmp_path / "none.db"), "hosts", "probe", "10.255.255.1", "--prometheus", "10.0.0.5"
    )
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("meshdeck: error: host.prometheus: host 10.255.255.1: '10.0.0.5': expected HOST:PORT")


def test_probe_shows_where_the_agent_exports_and_what_differs_from_the_host_settings() -> None:
    from dataclasses import replace

    from meshdeck_agent.protocol import DaemonSettings

    base = ProbeReport(
        target="gpu-a", route="root@gpu-a:22", host_key="ssh-ed25519 SHA256:abc", auth="publickey",
        python="/usr/bin/python3", python_version="3.11.4", machine="x86_64", agent_path="/a.pyz",
        uploaded=False, agent_version="0.1.0", protocol=1, seconds=1.0,
        inventory=Inventory.from_wire({"hostname": "gpu-a", "gpus": [], "nics": []}),
    )  # fmt: skip
    assert "exporter" not in render_probe("gpu-a", base)  # an agent that does not say
    running = replace(base, daemon=DaemonSettings(prometheus="127.0.0.1:9400"))
    assert "  exporter  Prometheus on 127.0.0.1:9400" in render_probe("gpu-a", running).splitlines()
    off = replace(base, daemon=DaemonSettings(), note="Prometheus exporter off, not on 10.0.0.5:9400: ...")
    lines = render_probe("gpu-a", off).splitlines()
    assert "  exporter  off" in lines and "  note      Prometheus exporter off, not on 10.0.0.5:9400: ..." in lines
    shown = off.to_json()
    assert shown["daemon"] == {"prometheus": None} and shown["note"].startswith("Prometheus exporter off")
    assert base.to_json()["daemon"] is None and base.to_json()["note"] == ""


def test_a_slurm_login_node_is_stored_listed_and_its_node_port_needs_slurm(capsys, db: str):
    code, out, _ = _run(capsys, "--db", db, "hosts", "add", "hpc", "me@login.example", "--slurm", "--node-port", "2022")
    assert code == 0 and out.strip() == "added hpc: me@login.example (Slurm login node)"
    (listed,) = json.loads(_run(capsys, "--db", db, "hosts", "list", "--json")[1])
    assert (listed["scheduler"], listed["node_port"]) == ("slurm", 2022)
    code, out, _ = _run(capsys, "--db", db, "hosts", "list")
    assert "slurm" in out.splitlines()[1] and "hpc: Slurm cluster (login node)" in out
    code, _, err = _run(capsys, "--db", db, "hosts", "add", "gpu-a", "10.0.0.5", "--node-port", "22")
    assert code == 2 and "host.node_port" in err and "only for --slurm hosts" in err
