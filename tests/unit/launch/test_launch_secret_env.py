"""Env values whose keys look secret (HF_TOKEN, WANDB_API_KEY, ...) are sent to the servers as they are,
and masked everywhere meshdeck shows or keeps them: the dry run (text and JSON), the launch's stderr and
the deployment records in the database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launch_builders import make_node, make_profile
from meshdeck.cli import main
from meshdeck.commands.launch import render_plan
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.profile import load_profile
from meshdeck.services.deployments.model import DeploymentSnapshot
from meshdeck.services.deployments.records import StoreRecorder
from meshdeck.store.database import open_database
from meshdeck.store.deployments import get_deployment

SECRET = "hf_Zq8ExampleSecretValue0123"
PROFILE = f"""\
name: ds32
model: deepseek-ai/DeepSeek-V3.2
hosts: [gpu-a, gpu-b]
gpus_per_node: 8
layout: {{tensor_parallel: 8, pipeline_parallel: 2}}
env:
  HF_TOKEN: {SECRET}
  WANDB_API_KEY: {SECRET}-w
  NCCL_SOCKET_IFNAME: eth0
"""


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("HF_TOKEN", True),
        ("hf_token", True),
        ("HUGGING_FACE_HUB_TOKEN", True),
        ("WANDB_API_KEY", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("PGPASSWORD", True),
        ("MyPassword", True),
        ("NCCL_SOCKET_IFNAME", False),
        ("HF_HOME", False),
        ("TOKENIZERS_PARALLELISM", False),  # a well-known switch, not a token
        ("OPENAI_API_KEY", True),
        ("AWS_SESSION_TOKEN", True),
        ("API_KEYS", True),
        ("myApiKey", True),
        ("SSL_KEYFILE_PASSWORD", True),  # the last part decides: a password, though KEYFILE names a file
        ("SSLKEYLOGFILE", False),  # a path a reviewer needs to see: KEY is inside a part, and it names a file
        ("HF_TOKEN_PATH", False),
        ("VLLM_SSL_KEYFILE", False),
        ("AWS_SHARED_CREDENTIALS_FILE", False),
        ("MAX_NUM_BATCHED_TOKENS", False),  # a count
        ("PYTHON_KEYRING_BACKEND", False),
    ],
)
def test_which_env_keys_look_secret(key: str, secret: bool) -> None:
    from meshdeck.core.secret_env import looks_secret

    assert looks_secret(key) is secret


def test_the_plan_sends_the_real_value(two_nodes: list) -> None:
    plan = build_launch_plan(load_profile(PROFILE), two_nodes, run_id="r")
    assert {c.env_dict["HF_TOKEN"] for c in plan.commands} == {SECRET}


def test_the_dry_run_text_and_json_mask_secret_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(PROFILE)
    assert main(["--db", str(tmp_path / "no.db"), "launch", str(profile), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert SECRET not in text and "HF_TOKEN=" in text and "NCCL_SOCKET_IFNAME=eth0" in text
    assert main(["--db", str(tmp_path / "no.db"), "launch", str(profile), "--dry-run", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert SECRET not in json.dumps(document)
    assert {n["env"]["NCCL_SOCKET_IFNAME"] for n in document["nodes"]} == {"eth0"}
    assert all("HF_TOKEN" in n["env"] and "WANDB_API_KEY" in n["env"] for n in document["nodes"])


def test_the_dry_run_shows_a_path_valued_key_a_reviewer_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(PROFILE + "  SSLKEYLOGFILE: /srv/share/tls-keys.log\n  HF_TOKEN_PATH: /run/hf/token\n")
    assert main(["--db", str(tmp_path / "no.db"), "launch", str(profile), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "SSLKEYLOGFILE=/srv/share/tls-keys.log" in text and "HF_TOKEN_PATH=/run/hf/token" in text
    assert SECRET not in text


def test_the_launch_stderr_plan_masks_secret_values(two_nodes: list) -> None:
    text = render_plan(build_launch_plan(load_profile(PROFILE), two_nodes, run_id="r"))
    assert SECRET not in text and "HF_TOKEN=" in text


def test_a_deployment_record_keeps_no_secret_anywhere_in_the_database(tmp_path: Path, two_nodes: list) -> None:
    plan = build_launch_plan(load_profile(PROFILE), two_nodes, run_id="r")
    snapshot = DeploymentSnapshot(id="ds32-1", name="ds32", engine="vllm", state="starting", reason="",
                                  workers=(), started_at=1.0)  # fmt: skip
    with open_database(tmp_path / "m.db") as db:
        StoreRecorder(db, profile_name="ds32", profile_yaml=PROFILE).deployment_started(snapshot, plan)
        record = get_deployment(db, "ds32-1")
        assert all(dict(node.env)["NCCL_SOCKET_IFNAME"] for node in record.nodes)
        assert all("HF_TOKEN" in dict(node.env) for node in record.nodes)
        assert SECRET not in json.dumps(record.plan) and SECRET not in (record.profile_yaml or "")
        kept = load_profile(record.profile_yaml or "")  # still a profile: the same one, its secrets masked
        assert kept.hosts == ["gpu-a", "gpu-b"] and set(kept.env) == {"HF_TOKEN", "WANDB_API_KEY", "NCCL_SOCKET_IFNAME"}
    for file in tmp_path.iterdir():  # the database, its WAL and anything beside it
        assert SECRET.encode() not in file.read_bytes(), file


def test_a_torch_record_masks_secrets_and_still_names_its_workload(tmp_path: Path) -> None:
    profile = make_profile(engine="torch", gpus_per_node=2, layout={"tensor_parallel": 2},
                           torch={"script": "collectives"}, env={"MY_SECRET": SECRET})  # fmt: skip
    plan = build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1")], run_id="r")
    snapshot = DeploymentSnapshot(id="t-1", name=profile.name, engine="torch", state="starting", reason="",
                                  workers=(), started_at=1.0)  # fmt: skip
    with open_database(tmp_path / "m.db") as db:
        StoreRecorder(db).deployment_started(snapshot, plan)
        env = dict(get_deployment(db, "t-1").nodes[0].env)
    assert SECRET not in json.dumps(env)
    assert env["MESHDECK_WORKLOAD_BUNDLE"].startswith("<inline workload: collectives.py sha256:")


def test_a_file_holding_a_keyring_reference_is_refused_at_launch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only a stored profile resolves references; a file launched as it is must hold the value."""
    profile = tmp_path / "p.yaml"
    profile.write_text(PROFILE.replace(SECRET, "keyring:meshdeck-profile-env/ds32/HF_TOKEN", 1))
    assert main(["--db", str(tmp_path / "no.db"), "launch", str(profile), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"meshdeck: error: {profile}: env.HF_TOKEN: is a keyring reference"), err
