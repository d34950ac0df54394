"""`meshdeck hosts add|list|remove` against a temporary database, and input errors as one line + exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from meshdeck.cli import main


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
    assert out.splitlines()[0].split() == ["NAME", "TARGET", "PORT", "JUMP", "KEY", "SIMULATE"]
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
