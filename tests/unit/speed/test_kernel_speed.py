"""The aiconfigurator-core adapter: what it answers, where it stands aside for the roofline, and how it says so."""

from __future__ import annotations

import json
import threading

import pytest
from meshdeck.cli import main
from meshdeck.core.cluster import ClusterSpec, default_inter_node_bytes_per_s
from meshdeck.core.gpu_spec import resolve_gpu
from meshdeck.core.planner import PlanRequest, plan
from meshdeck.core.serving import EngineShape, SpeedQuery, Workload
from meshdeck.services.catalog import load_gpu_catalog, load_model
from meshdeck.services.planning import plan_with_speed
from meshdeck.speed import kernels
from meshdeck.speed.kernels import KernelSpeed, kernel_speed_for

SERVING_KEYS = {
    "ttft_ms",
    "tpot_ms",
    "output_tokens_per_s",
    "output_tokens_per_s_per_gpu",
    "tokens_per_s_per_user",
    "concurrency",
    "source",
}


def request(gpu: str = "H200-SXM-141GB", nodes: int = 1, **kwargs) -> PlanRequest:
    spec = resolve_gpu(gpu, load_gpu_catalog())
    cluster = ClusterSpec(nodes, 8, spec, "nvlink", default_inter_node_bytes_per_s(8, "nvlink"))
    return PlanRequest(load_model("deepseek-v3.2"), cluster, **kwargs)


def run_json(capsys, *argv: str) -> dict:
    assert main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_contract_tp8_at_a_stated_workload_names_its_measured_source(capsys) -> None:
    data = run_json(
        capsys, "--model", "deepseek-v3.2", "--gpu", "H200-SXM-141GB", "--nodes", "1", "--gpus-per-node", "8",
        "--tensor-parallel", "8", "--vllm-version", "0.13", "--isl", "1024", "--osl", "2048", "--concurrency", "100",
    )  # fmt: skip
    tp8 = next(lay for lay in data["layouts"] if (lay["pipeline_parallel"], lay["data_parallel"]) == (1, 1))
    serving = tp8["serving"]
    assert serving.keys() >= SERVING_KEYS
    assert serving["concurrency"] == 100 and serving["queued"] == 0
    assert "aiconfigurator-core" in serving["source"] and "h200_sxm" in serving["source"]
    assert "vLLM 0.24.0" in serving["source"]
    assert "0.13" in serving["source_detail"]["nearest"]  # the tables' release stands in for the launch's
    assert 20 < serving["tpot_ms"] < 100 and serving["tokens_per_s_per_user"] == pytest.approx(
        1000 / serving["tpot_ms"], rel=0.01
    )
    assert serving["output_tokens_per_s_per_gpu"] == pytest.approx(serving["output_tokens_per_s"] / 8, rel=0.01)
    assert data["workload"] == {
        "isl": 1024, "osl": 2048, "concurrency": 100, "ttft_ms": None, "tpot_ms": None, "stated": True,
    }  # fmt: skip


def test_contract_dp8_holds_a_deployment_wide_concurrency_split_over_its_ranks(capsys) -> None:
    data = run_json(
        capsys, "--gpu", "H200-SXM-141GB", "--data-parallel", "8", "--tensor-parallel", "1", "--expert-parallel", "on",
        "--isl", "1024", "--osl", "1024", "--concurrency", "100",
    )  # fmt: skip
    serving = data["layouts"][0]["serving"]
    assert serving["concurrency"] == 100 and serving["batch_per_replica"] == 13


def test_contract_disaggregated_plans_and_the_aggregated_best(capsys) -> None:
    data = run_json(
        capsys, "--model", "deepseek-v3.2", "--gpu", "H200-SXM-141GB", "--nodes", "4", "--gpus-per-node", "8",
        "--isl", "8192", "--osl", "1024", "--disaggregated",
    )  # fmt: skip
    options = data["disaggregated"]
    assert options and data["aggregated_best"]["serving"].keys() >= SERVING_KEYS
    for option in options:
        for pool in ("prefill", "decode"):
            assert option[pool].keys() >= {"tensor_parallel", "data_parallel", "expert_parallel", "workers", "gpus"}
        assert option["serving"].keys() >= SERVING_KEYS
        assert option["prefill"]["gpus"] + option["decode"]["gpus"] <= 32
    rates = [option["serving"]["output_tokens_per_s"] for option in options]
    assert rates == sorted(rates, reverse=True)


def test_a_gpu_without_tables_plans_with_the_roofline_and_says_so_everywhere(capsys) -> None:
    data = run_json(capsys, "--model", "deepseek-v3", "--gpu", "H800-SXM5-80GB", "--nodes", "2", "--top", "3")
    assert data["speed_source"]["kind"] == "roofline"
    assert "no kernel tables for H800-SXM5-80GB" in data["speed_source"]["reason"]
    assert all(layout["serving"]["source"] == "roofline" for layout in data["layouts"])
    assert main(["plan", "--model", "deepseek-v3", "--gpu", "H800-SXM5-80GB", "--nodes", "2"]) == 0
    text = capsys.readouterr().out
    assert "speed from the ROOFLINE estimate" in text and "H800-SXM5-80GB" in text and "~" in text


def test_roofline_by_choice_is_labelled_as_chosen(capsys) -> None:
    data = run_json(capsys, "--gpu", "H200-SXM-141GB", "--speed", "roofline", "--top", "1")
    assert data["speed_source"]["kind"] == "roofline" and "--speed roofline" in data["speed_source"]["reason"]


def test_without_the_package_the_reason_names_the_platforms(monkeypatch) -> None:
    monkeypatch.setattr(kernels, "package_version", lambda: None)
    reason = kernel_speed_for(request())
    assert isinstance(reason, str) and "not installed" in reason and "Linux" in reason
    result = plan_with_speed(request())
    assert result.speed_source is not None and not result.speed_source.measured
    assert result.layouts[0].serving is not None and result.layouts[0].serving.source.label == "roofline"


def test_a_query_the_library_cannot_answer_falls_back_to_the_roofline_per_layout(monkeypatch) -> None:
    speed = kernel_speed_for(request())
    assert isinstance(speed, KernelSpeed)

    def refuse_dp(query: SpeedQuery):
        if query.shape.data_parallel > 1:
            raise RuntimeError("no table for this shape")
        return original(query)

    original = speed._ask
    monkeypatch.setattr(speed, "_ask", refuse_dp)
    monkeypatch.setattr(kernels, "_ANSWERS", type(kernels._ANSWERS)())
    result = plan(request(workload=Workload(1000, 1000, stated=True)), speed)
    sources = {layout.label(): layout.serving.source for layout in result.fitting if layout.serving}
    assert sources["TP8"].measured and not sources["TP1·DP8·EP"].measured
    # within a practice tier the stand-ins rank after every measured layout, and the plan says they stood in
    for tier in {layout.practice_tier for layout in result.fitting}:
        flags = [lay.serving.source.measured for lay in result.fitting if lay.serving and lay.practice_tier == tier]
        assert flags == sorted(flags, reverse=True)
    assert any("no measured-kernel answer" in note for note in result.notes)


def test_answers_are_cached_and_safe_from_two_threads() -> None:
    speed = kernel_speed_for(request())
    assert isinstance(speed, KernelSpeed)
    query = SpeedQuery(EngineShape(8, 1, 1, False, 8), "aggregated", 7, 1111, 222, 8192)
    answers: list[object] = []
    threads = [threading.Thread(target=lambda: answers.append(speed.times(query))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(map(repr, answers))) == 1 and answers[0] is not None


def test_mtp_decodes_more_tokens_per_step_than_without() -> None:
    speed = kernel_speed_for(request(mtp=True))
    assert isinstance(speed, KernelSpeed)
    shape = EngineShape(8, 1, 1, False, 8)
    plain = speed.times(SpeedQuery(shape, "decode", 32, 1024, 1024, 8192, 0))
    drafted = speed.times(SpeedQuery(shape, "decode", 32, 1024, 1024, 8192, 3))
    assert plain is not None and drafted is not None
    assert drafted.tpot_ms < plain.tpot_ms  # ~2.7 accepted tokens a step outweigh the drafts' cost


def test_library_log_lines_never_reach_the_terminal(capsys) -> None:
    main(["plan", "--gpu", "H200-SXM-141GB", "--top", "1", "--isl", "333", "--osl", "77"])
    assert capsys.readouterr().err == ""
