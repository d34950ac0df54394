"""Every flag meshdeck hands `vllm serve` exists in the vLLM that runs here (asked of its own parser), not
only in the checked-in list read from vLLM 0.33.0's source. Differences between the two lists are allowed
(the CPU build is 0.32.0) as long as meshdeck emits none of the missing flags."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.network import NodeNetwork
from meshdeck.launch.vllm_flags import flags_in
from meshdeck.launch.vllm_known_flags import VLLM_SERVE_FLAGS
from meshdeck.services.vllm_local import local_vllm_profile, tiny_model_dir

REPO = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def installed(vllm_executable: str) -> dict:
    python = Path(vllm_executable).with_name("python")
    ran = subprocess.run(
        [str(python), str(REPO / "packaging" / "vllm_cpu" / "serve_flags.py")], capture_output=True, text=True,
        timeout=500,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    return json.loads(ran.stdout.strip().splitlines()[-1])


def test_every_flag_meshdeck_emits_is_accepted_by_the_installed_vllm(installed: dict) -> None:
    sys.path.insert(0, str(REPO / "tests" / "unit" / "launch"))
    from test_launch_vllm_flag_list import every_layout_class_plan  # the unit tests' plan of every layout class

    accepted = set(installed["flags"])
    local = local_vllm_profile(["a", "b"], executable="/v/vllm", model=str(tiny_model_dir()), port=1, master_port=2)
    plans = [*every_layout_class_plan(), build_launch_plan(local, [NodeNetwork("a", "127.0.0.1"),
                                                                    NodeNetwork("b", "127.0.0.1")], run_id="r")]  # fmt: skip
    emitted = {flag for plan in plans for c in plan.commands if c.argv[1:2] == ("serve",) for flag in flags_in(c.argv)}
    assert emitted - accepted == set(), f"flags vLLM {installed['version']} does not accept"


def test_the_checked_in_list_differs_from_the_installed_release_only_by_newer_flags(installed: dict) -> None:
    assert installed["version"] == "0.32.0+cpu"
    accepted = set(installed["flags"]) - {"-h", "--help"}
    # vLLM 0.33.0 added these; 0.32.0 (the CPU build on the package index) does not have them
    assert set(VLLM_SERVE_FLAGS) - accepted == {
        "--monokernel", "--no-monokernel", "--reasoning-effort-map", "--sleep-mode-backend", "--watchdog-config",
    }  # fmt: skip
    assert accepted - set(VLLM_SERVE_FLAGS) == set()
