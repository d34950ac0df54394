"""Pre-flight: each check passes or fails with a reason a user can act on, from the agents' real reply shapes."""

from __future__ import annotations

from typing import Any

from launch_builders import make_node, make_profile
from meshdeck.launch import preflight_rules as rules
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.profile import profile_from_mapping
from meshdeck.services.preflight import (
    SIMULATED_NO_RAY,
    SIMULATED_VLLM,
    model_path,
    run_preflight,
    versions_python,
)
from preflight_agents import FILES, ScriptedAgents

GIB = 1024**3


def test_model_files_must_match_the_head_file_by_file() -> None:
    other = {**FILES, "files": [["config.json", 1639], ["model-00001-of-000163.safetensors", 1000]]}
    results = rules.model_files("/m", {"gpu-a": FILES, "gpu-b": FILES, "gpu-c": other,
                                       "gpu-d": {"exists": False, "files": []}, "gpu-e": "RpcTimeout: no answer"})  # fmt: skip
    verdicts = {r.host: (r.passed, r.reason) for r in results}
    assert verdicts["gpu-a"][0] and "reference" in verdicts["gpu-a"][1]
    assert verdicts["gpu-b"] == (True, "same 2 files as gpu-a")
    assert (
        not verdicts["gpu-c"][0]
        and "model-00001-of-000163.safetensors: 1000 vs 5234139343 bytes" in verdicts["gpu-c"][1]
    )
    assert verdicts["gpu-d"] == (False, "/m is not on this node; download it to the same path")
    assert verdicts["gpu-e"] == (False, "could not list /m: RpcTimeout: no answer")


def test_versions_must_be_installed_and_equal() -> None:
    a = {"python": "3.11.7", "torch": "2.9.0", "vllm": "0.33.0", "nccl": "2.27.3", "ray": None, "error": None}
    b = {**a, "vllm": "0.32.1"}
    c = {**a, "nccl": None}
    results = rules.versions(["vllm", "torch", "nccl"], {"gpu-a": a, "gpu-b": b, "gpu-c": c})
    failed = [(r.host, r.reason) for r in results if not r.passed]
    assert ("gpu-c", "not installed: nccl") in failed
    assert (None, "vllm differs across nodes: gpu-a 0.33.0, gpu-b 0.32.1, gpu-c 0.33.0") in failed
    error = {**a, "error": "interpreter 'python3' not found on this server's PATH"}
    assert not rules.versions(["torch"], {"gpu-a": error})[0].passed


def test_free_gpu_memory_must_cover_what_vllm_claims() -> None:
    total = 150_000_000_000
    roomy = [{"index": i, "memory_total_bytes": total, "memory_used_bytes": 600_000_000} for i in range(8)]
    busy = [dict(g) for g in roomy]
    busy[3]["memory_used_bytes"] = 40_000_000_000  # someone else's process
    results = rules.gpu_memory(8, 0.9, {"gpu-a": roomy, "gpu-b": busy, "gpu-c": roomy[:4]})
    verdicts = {r.host: r for r in results}
    assert verdicts["gpu-a"].passed
    assert not verdicts["gpu-b"].passed and verdicts["gpu-b"].reason.startswith("GPU 3: 102.4 GiB free < 125.7 GiB")
    assert verdicts["gpu-c"].reason == "4 GPU(s), the plan needs 8"
    assert rules.gpu_memory(2, None, {"cpu": []}, allow_cpu=True)[0].passed
    assert not rules.gpu_memory(2, 0.9, {"cpu": []})[0].passed


def test_ports_reach_and_clocks() -> None:
    purposes = {8000: "vLLM API", 29501: "torch.distributed master (vLLM mp)"}
    results = rules.ports_free("gpu-a", purposes, {"ports": {"8000": True, "29501": False}})
    assert [r.passed for r in results] == [True, False]
    assert results[1].reason == "29501 (torch.distributed master (vLLM mp)) is already taken on the head"
    reach = rules.reach_head("10.0.0.1", {("gpu-b", 29501): {"ok": False, "error": "10.0.0.1:29501: timed out"},
                                          ("gpu-a", 29501): {"ok": True, "rtt_ms": 0.2}})  # fmt: skip
    assert [(r.host, r.passed) for r in reach] == [("gpu-a", True), ("gpu-b", False)]
    assert "timed out" in reach[1].reason
    skewed = rules.clocks({"gpu-a": (0.01, 0.002), "gpu-b": (1.9, 0.002), "gpu-c": "ConnectionLost"})
    assert [r.passed for r in skewed] == [False, False]
    assert "gpu-b is 1.89 s ahead of gpu-a" in skewed[1].reason
    assert rules.clocks({"gpu-a": (0.01, 0.002), "gpu-b": (0.4, 0.002)})[0].passed


def two_node_plan():
    profile = make_profile(hosts=["gpu-a", "gpu-b"], layout={"tensor_parallel": 8, "pipeline_parallel": 2})
    plan = build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1"), make_node("gpu-b", "10.0.0.2")], run_id="r")
    return profile, plan


def test_preflight_asks_every_node_and_probes_the_heads_ports_with_a_listener() -> None:
    profile, plan = two_node_plan()
    agents = ScriptedAgents()
    report = run_preflight(agents, plan, profile)
    assert report.passed, [r for r in report.results if not r.passed]
    checks = {(r.check, r.host) for r in report.results}
    assert {("model files", "gpu-a"), ("model files", "gpu-b"), ("versions", "gpu-b"), ("GPU memory", "gpu-b"),
            ("ports free", "gpu-a"), ("reach head", "gpu-b"), ("clocks", None)} <= checks  # fmt: skip
    probes = [(h, p["port"]) for h, m, p in agents.calls if m == "checks.tcp_connect"]
    assert sorted(probes) == [("gpu-a", 8000), ("gpu-a", 29501), ("gpu-b", 8000), ("gpu-b", 29501)]
    assert all(p["host"] == "10.0.0.1" for h, m, p in agents.calls if m == "checks.tcp_connect")
    assert not agents.probe_running  # the listener was stopped
    files = next(p for h, m, p in agents.calls if m == "checks.files")
    assert files["path"] == "~/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V3.2"


def test_preflight_reports_a_taken_port_and_an_unreachable_node() -> None:
    profile, plan = two_node_plan()
    report = run_preflight(ScriptedAgents(taken={29501}), plan, profile)
    assert not report.passed
    assert any(r.check == "ports free" and not r.passed and "29501" in r.reason for r in report.results)
    report = run_preflight(ScriptedAgents(unreachable={"gpu-b"}), plan, profile)
    assert [r.host for r in report.failures] == ["gpu-b", "gpu-b"]
    assert all("timed out" in r.reason for r in report.failures)


def test_a_wrong_shaped_inventory_fails_that_hosts_gpu_check_naming_the_field_and_the_rest_runs() -> None:
    profile, plan = two_node_plan()
    report = run_preflight(ScriptedAgents(inventories={"gpu-b": {"gpus": 5}}), plan, profile)
    (failure,) = report.failures
    assert (failure.check, failure.host) == ("GPU memory", "gpu-b")
    assert "host gpu-b: inventory.gpus: must be a list, got 5" in failure.reason
    assert any(r.check == "GPU memory" and r.host == "gpu-a" and r.passed for r in report.results)


def test_where_the_model_and_interpreter_are_looked_for() -> None:
    assert model_path(make_profile(model="/models/ds32")) == "/models/ds32"
    assert model_path(make_profile(env={"HF_HOME": "/data/hf"})) == "/data/hf/hub/models--deepseek-ai--DeepSeek-V3.2"
    torch_profile = make_profile(engine="torch", torch={"script": "tiny-deepseek", "python": "/opt/py/bin/python"})
    assert model_path(torch_profile) is None and versions_python(torch_profile) == "/opt/py/bin/python"
    assert versions_python(make_profile(vllm={"executable": "/opt/venv/bin/vllm"})) == "/opt/venv/bin/python3"


def _simulated_inventory() -> dict[str, Any]:
    return {"simulated": True, "gpus": [{"index": i, "memory_total_bytes": 150 * 10**9} for i in range(8)], "nics": []}


def test_on_simulated_agents_the_vllm_checks_say_the_agent_stands_in_and_ray_fails_them() -> None:
    profile, plan = two_node_plan()
    agents = ScriptedAgents(inventories=dict.fromkeys(plan.hosts, _simulated_inventory()))
    report = run_preflight(agents, plan, profile)
    assert report.passed, report.failures
    assert {r.reason for r in report.results if r.check in ("versions", "model files")} == {SIMULATED_VLLM}
    assert not [m for _h, m, _p in agents.calls if m in ("checks.versions", "checks.files")]
    ray_profile = make_profile(hosts=["gpu-a", "gpu-b"], layout={"tensor_parallel": 8, "pipeline_parallel": 2},
                               vllm={"distributed_backend": "ray"})  # fmt: skip
    ray_plan = build_launch_plan(ray_profile, [make_node("gpu-a", "10.0.0.1"), make_node("gpu-b", "10.0.0.2")],
                                 run_id="r")  # fmt: skip
    agents = ScriptedAgents(inventories=dict.fromkeys(ray_plan.hosts, _simulated_inventory()))
    failures = run_preflight(agents, ray_plan, ray_profile).failures
    assert [(r.check, r.host, r.reason) for r in failures] == [
        ("versions", "gpu-a", SIMULATED_NO_RAY),
        ("versions", "gpu-b", SIMULATED_NO_RAY),
    ]


def test_a_torch_job_on_simulated_agents_needs_no_nccl_it_runs_on_cpu_with_gloo() -> None:
    """The demo's torch run: before, its GPUs (simulated) made pre-flight require NCCL, which a CPU torch lacks."""
    profile = make_profile(engine="torch", hosts=["gpu-a", "gpu-b"], gpus_per_node=2,
                           layout={"tensor_parallel": 1, "data_parallel": 4, "expert_parallel": True},
                           torch={"script": "tiny-deepseek"})  # fmt: skip
    plan = build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1"), make_node("gpu-b", "10.0.0.2")], run_id="r")

    class CpuTorch(ScriptedAgents):
        def call(self, host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None):
            answer = super().call(host, method, params, timeout)
            return {**answer, "nccl": None, "vllm": None} if method == "checks.versions" else answer

    simulated = CpuTorch(inventories=dict.fromkeys(plan.hosts, _simulated_inventory()))
    assert run_preflight(simulated, plan, profile).passed, run_preflight(simulated, plan, profile).failures
    real = CpuTorch()  # real GPUs without NCCL: a torch job would fail to form its NCCL group
    assert {(r.check, r.reason) for r in run_preflight(real, plan, profile).failures} == {
        ("versions", "not installed: nccl")
    }


def pd_plan() -> tuple[Any, Any]:
    profile = profile_from_mapping(
        {
            "name": "pd", "model": "deepseek-ai/DeepSeek-V3.2", "hosts": ["gpu-a", "gpu-b"], "gpus_per_node": 8,
            "disaggregated": {"prefill": {"hosts": ["gpu-a"], "layout": {"tensor_parallel": 8}},
                              "decode": {"hosts": ["gpu-b"], "layout": {"tensor_parallel": 8}}},
        }
    )  # fmt: skip
    nodes = [make_node("gpu-a", "10.0.0.1"), make_node("gpu-b", "10.0.0.2")]
    return profile, build_launch_plan(profile, nodes, run_id="r")


def test_a_disaggregated_preflight_checks_each_nodes_ports_and_that_every_node_reaches_them() -> None:
    profile, plan = pd_plan()
    agents = ScriptedAgents(taken={5700})
    report = run_preflight(agents, plan, profile)
    (taken,) = [r for r in report.failures if r.check == "ports free"]
    assert (taken.host, taken.reason) == ("gpu-b", "5700 (decode0 NIXL side channel) is already taken on gpu-b")
    assert not [c for c in agents.calls if c[1] == "checks.tcp_connect"]  # a taken port: nothing probed
    agents = ScriptedAgents()
    run_preflight(agents, plan, profile)
    probes = {(h, p["host"], p["port"]) for h, m, p in agents.calls if m == "checks.tcp_connect"}
    # every node reaches the decode node's API and side channel at the decode node's address
    assert {("gpu-a", "10.0.0.2", 8200), ("gpu-a", "10.0.0.2", 5700), ("gpu-b", "10.0.0.1", 5600)} <= probes
    assert ("gpu-a", "10.0.0.1", 8000) in probes  # the router, on the first prefill node


def test_rdma_transport_needs_an_active_ib_or_roce_port_on_every_engine_node() -> None:
    profile, plan = pd_plan()
    ib = {"gpus": [{"index": i, "memory_total_bytes": 150 * 10**9} for i in range(8)],
          "nics": [{"name": "mlx5_0/1", "kind": "infiniband", "state": "ACTIVE"}]}  # fmt: skip
    report = run_preflight(ScriptedAgents(inventories={"gpu-a": ib}), plan, profile)
    rdma = {r.host: (r.passed, r.reason) for r in report.results if r.check == "rdma devices"}
    assert rdma["gpu-a"] == (True, "mlx5_0/1 active for NIXL/UCX")
    assert not rdma["gpu-b"][0] and "kv_connector.transport: tcp" in rdma["gpu-b"][1]
