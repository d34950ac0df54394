"""`meshdeck launch ds32` takes a stored profile's name as well as a file, as `deployments logs ds32` takes the
stored name; a name that is both a file here and a stored profile is refused, naming both and how to pick
one. Before, `launch ds32` said "ds32: no such file"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from meshdeck.cli import main
from meshdeck.services import profiles as profile_service
from meshdeck.store.database import open_database

STORED = """\
name: ds32
model: deepseek-ai/DeepSeek-V3.2
engine: vllm
hosts: [gpu-a, gpu-b]
gpus_per_node: 8
layout: {tensor_parallel: 8, pipeline_parallel: 2, data_parallel: 1, expert_parallel: false}
env: {HF_TOKEN: hf_stored_secret}
"""
FILE = STORED.replace("hosts: [gpu-a, gpu-b]", "hosts: [gpu-x, gpu-y]").replace(
    "env: {HF_TOKEN: hf_stored_secret}\n", ""
)


@pytest.fixture
def db(tmp_path: Path, memory_keyring: Any) -> str:
    path = str(tmp_path / "m.db")
    with open_database(path) as database:
        profile_service.import_profile(database, STORED, "ds32.yaml")  # its secret goes to the (memory) keyring
    return path


def _hosts(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [node["host"] for node in json.loads(capsys.readouterr().out)["nodes"]]


def test_launch_takes_a_stored_profiles_name(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["--db", db, "launch", "ds32", "--dry-run", "--json"]) == 0
    assert _hosts(capsys) == ["gpu-a", "gpu-b"]


def test_a_name_that_is_both_a_file_and_a_stored_profile_is_refused_naming_both_ways(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds32").write_text(FILE)

    code = main(["--db", db, "launch", "ds32", "--dry-run", "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert "'ds32' is both a file here and a stored profile (v1)" in err
    assert "write ./ds32 to launch the file, or --stored to launch the stored profile" in err

    assert main(["--db", db, "launch", "./ds32", "--dry-run", "--json"]) == 0
    assert _hosts(capsys) == ["gpu-x", "gpu-y"]  # the file
    assert main(["--db", db, "launch", "ds32", "--stored", "--dry-run", "--json"]) == 0
    assert _hosts(capsys) == ["gpu-a", "gpu-b"]  # the stored profile


def test_a_name_that_is_neither_lists_the_stored_profiles(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["--db", db, "launch", "ds33", "--dry-run"]) == 2
    assert "'ds33' is neither a file nor a stored profile (stored: ds32)" in capsys.readouterr().err
    assert main(["--db", db, "launch", "ds33", "--stored", "--dry-run"]) == 2
    assert "no stored profile named 'ds33' (stored: ds32)" in capsys.readouterr().err
    assert main(["--db", db, "launch", "missing.yaml", "--dry-run"]) == 2
    assert "missing.yaml: no such file" in capsys.readouterr().err


def test_a_stored_profile_launches_with_its_secret_from_the_keyring_and_its_version_recorded(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from meshdeck.commands import launch as launch_command

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(launch_command, "FleetService", lambda: _NoFleet())
    monkeypatch.setattr(launch_command.deploy_hosts, "connect", lambda *args: None)
    monkeypatch.setattr(launch_command.deploy_hosts, "addresses_for", lambda hosts, db: dict.fromkeys(hosts, "h"))
    monkeypatch.setattr(launch_command, "prepare_launch", lambda profile, fleet, **_: _Prepared())
    monkeypatch.setattr(launch_command, "render_plan", lambda plan: "")
    launched: list[tuple[Any, Any]] = []
    monkeypatch.setattr(
        launch_command, "_launch", lambda fleet, profile, prepared, run_id, args, rec: launched.append((profile, rec))
    )
    assert main(["--db", db, "launch", "ds32"]) == 0
    ((profile, recorder),) = launched
    assert profile.env["HF_TOKEN"] == "hf_stored_secret"  # read back from the keyring, not the reference stored
    assert (recorder.profile_name, recorder.profile_version) == ("ds32", 1)
    assert "hf_stored_secret" not in (recorder.profile_yaml or "")  # the stored text holds the reference


class _NoFleet:
    def __enter__(self) -> _NoFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _Prepared:
    plan = None
    planned_note = ""
    simulated = False
