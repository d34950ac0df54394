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


def pool_argvs() -> list[list[str]]:
    """Every prefill and decode worker's `vllm serve` flags of disaggregated plans with wide EP (DeepEP, EPLB,
    DBO, NixlConnector) and without, as the planner writes them for the newest release."""
    from dataclasses import replace

    from meshdeck.core.cluster import ClusterSpec, default_inter_node_bytes_per_s
    from meshdeck.core.gpu_spec import resolve_gpu
    from meshdeck.core.planner import PlanRequest, plan
    from meshdeck.core.serving import Workload
    from meshdeck.services.catalog import load_gpu_catalog, load_model

    gpu = resolve_gpu("H200-SXM-141GB", load_gpu_catalog())
    cluster = ClusterSpec(4, 8, gpu, "nvlink", default_inter_node_bytes_per_s(8, "nvlink"))
    argvs = []
    for layout in ({}, {"tensor_parallel": 1, "pipeline_parallel": 1, "data_parallel": 16, "expert_parallel": True}):
        request = PlanRequest(load_model("deepseek-v3.2"), cluster, max_model_len=16384, **layout)
        result = plan(replace(request, workload=Workload(2048, 1024, stated=True), disaggregated=True))
        for option in result.disaggregated[:3]:
            argvs += [["--model", "m", *pool.vllm_args] for pool in (option.prefill, option.decode)]
    assert any("--all2all-backend" in argv for argv in argvs) and any("--eplb-config" in argv for argv in argvs)
    return argvs


V4_MODELS = ("deepseek-v4-pro", "deepseek-v4-flash")


def v4_argvs() -> list[list[str]]:
    """The top layouts' `vllm serve` flags of DeepSeek-V4 plans (Pro on 2 × 8 H200, Flash on one node) with MTP,
    as the planner writes them for the newest release: V4's tokenizer mode, parsers and speculative config."""
    from meshdeck.core.cluster import ClusterSpec, default_inter_node_bytes_per_s
    from meshdeck.core.gpu_spec import resolve_gpu
    from meshdeck.core.planner import PlanRequest, plan
    from meshdeck.services.catalog import load_gpu_catalog, load_model

    gpu = resolve_gpu("H200-SXM-141GB", load_gpu_catalog())
    argvs = []
    for model, nodes in zip(V4_MODELS, (2, 1), strict=True):
        cluster = ClusterSpec(nodes, 8, gpu, "nvlink", default_inter_node_bytes_per_s(8, "nvlink"))
        request = PlanRequest(load_model(model), cluster, max_model_len=65536, mtp=True, mtp_speculative_tokens=2)
        argvs += [["--model", "m", *layout.vllm_args] for layout in plan(request).layouts[:3]]
    assert argvs and all("deepseek_v4" in argv for argv in argvs)
    return argvs


@pytest.fixture(scope="module")
def installed(vllm_executable: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    python = Path(vllm_executable).with_name("python")
    argvs = tmp_path_factory.mktemp("pools") / "argvs.json"
    argvs.write_text(json.dumps(pool_argvs() + v4_argvs()))
    ran = subprocess.run(
        [str(python), str(REPO / "packaging" / "vllm_cpu" / "serve_flags.py"), str(argvs)], capture_output=True,
        text=True, timeout=500,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    return {**json.loads(ran.stdout.strip().splitlines()[-1]), "argvs": json.loads(argvs.read_text())}


def test_every_disaggregated_pools_flags_parse_in_the_installed_vllm(installed: dict) -> None:
    """Prefill and decode workers' flags (NixlConnector's JSON, DeepEP backends, EPLB's config, DBO) as vLLM's
    own parser reads them: choices and JSON-valued configs included."""
    refused = [
        (argv, answer) for argv, answer in zip(installed["argvs"], installed["parsed"], strict=True) if answer != "ok"
    ]
    assert not refused, refused


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


def test_a_v4_plans_flags_parse_and_name_what_the_installed_vllm_registers(installed: dict) -> None:
    """DeepSeek-V4 plans' argv parse with the installed vLLM's own parser, and the tokenizer mode, reasoning parser
    and tool-call parser they name are registered there (the parser takes any string; the engine looks the names
    up when it starts, so a wrong one would only fail at launch)."""
    from meshdeck.launch.vllm_flags import flag_values

    v4 = [
        (argv, answer)
        for argv, answer in zip(installed["argvs"], installed["parsed"], strict=True)
        if "deepseek_v4" in argv
    ]
    assert v4 and all(answer == "ok" for _, answer in v4), v4
    registered = installed["registered"]
    for argv, _ in v4:
        values = flag_values(argv)
        assert values["--tokenizer-mode"] == "deepseek_v4" and "deepseek_v4" in registered["tokenizer_modes"]
        assert values["--reasoning-parser"] in registered["reasoning_parsers"]
        assert values["--tool-call-parser"] in registered["tool_parsers"]
        assert json.loads(values["--speculative-config"] or "{}")["method"] == "mtp"
    # V3.2's names are still registered beside V4's
    assert {"deepseek_v32"} <= set(registered["tokenizer_modes"]) and "deepseek_v3" in registered["reasoning_parsers"]
