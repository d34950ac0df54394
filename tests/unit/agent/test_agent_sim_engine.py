"""A `--simulate` agent chooses its engine stand-in from the worker's own argv: what it stands in for, what
it refuses, and the startup numbers it derives (checked against vLLM's published log, not against meshdeck's
planner, which the agent never imports)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from meshdeck_agent.gpu.catalog import parse_simulate
from meshdeck_agent.protocol import ProtocolError
from meshdeck_agent.sim.engine import StandInChooser, is_vllm_serve, parse_vllm_serve
from meshdeck_agent.sim.memory import KNOWN_CONFIGS, model_config_for, stage_layer_counts
from meshdeck_agent.sim.spec import validate_simulate

GIB = 1 << 30
MODELS = Path(__file__).resolve().parents[3] / "resources" / "models"
V32 = "deepseek-ai/DeepSeek-V3.2"
H200 = StandInChooser(parse_simulate("8xH200"))


def serve(*flags: str, model: str = V32) -> list[str]:
    return ["/opt/venv/bin/vllm", "serve", model, *flags]


def test_the_published_v32_tp8_h200_startup_is_reproduced_within_a_few_percent():
    # vLLM 0.16.0, DeepSeek-V3.2, TP8 on 8×H200, gpu_memory_utilization 0.85, max_model_len 16384 (VLLM-FACTS.md):
    # "Model loading took 80.78 GiB", "Available KV cache memory: 30.52 GiB", "GPU KV cache size: 418,304 tokens"
    plan = H200.plan_for(serve("-tp", "8", "--max-model-len", "16384", "--gpu-memory-utilization", "0.85"), {}, ())
    assert plan is not None
    assert plan["weights_bytes"] / GIB == pytest.approx(80.78, rel=0.03)
    assert plan["kv_cache_bytes"] / GIB == pytest.approx(30.52, rel=0.05)
    assert plan["kv_tokens"] == pytest.approx(418_304, rel=0.05) and plan["kv_tokens"] % 64 == 0
    assert plan["max_concurrency"] == pytest.approx(plan["kv_tokens"] / 16384)
    assert plan["gpu_memory_bytes"] >= 0.85 * (143771 - 570) * 2**20  # the whole budget, held once up


@pytest.mark.parametrize(("name", "model_type"), [("deepseek-v3.json", "deepseek_v3"),
                                                  ("deepseek-v3.2.json", "deepseek_v32")])  # fmt: skip
def test_the_config_facts_the_agent_carries_equal_the_bundled_model_cards(name: str, model_type: str):
    card = json.loads((MODELS / name).read_text())
    facts = KNOWN_CONFIGS[model_type]
    assert {key: card[key] for key in facts} == facts


@pytest.mark.parametrize(
    ("model", "model_type"),
    [
        ("deepseek-ai/DeepSeek-V3.2", "deepseek_v32"),
        ("deepseek-ai/DeepSeek-V3.2-Exp", "deepseek_v32"),
        ("/models/DeepSeek-V3_2/", "deepseek_v32"),
        ("deepseek-ai/DeepSeek-V3", "deepseek_v3"),
        ("deepseek-ai/DeepSeek-R1-0528", "deepseek_v3"),
        ("moonshotai/Kimi-K2-Thinking", None),
        ("deepseek-ai/deepseek-coder-6.7b", None),
    ],
)
def test_models_are_known_by_their_hugging_face_or_folder_names(model: str, model_type: str | None):
    config = model_config_for(model)
    assert (config.model_type if config else None) == model_type


def test_only_vllm_serve_gets_a_stand_in_and_everything_else_runs_as_it_is():
    assert is_vllm_serve(["vllm", "serve", V32]) and is_vllm_serve(["/venv/bin/vllm", "--version-check", "serve", "m"])
    assert not is_vllm_serve(["vllm", "bench", "serve"]) and not is_vllm_serve(["python3", "-m", "vllm", "serve"])
    assert H200.plan_for(["torchrun", "--nnodes", "2", "train.py"], {}, ()) is None
    assert H200.plan_for(["sh", "-c", "vllm serve x"], {}, ()) is None


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["/venv/bin/ray", "start", "--head", "--port=6379", "--block"], "Ray would find no GPUs"),
        (serve("-tp", "8", "--distributed-executor-backend", "ray"), "Ray would find no GPUs"),
        (serve("-dp", "2", "-dpb", "ray"), "Ray would find no GPUs"),
        (serve("-tp", "8", model="moonshotai/Kimi-K2-Thinking"), "no config.json facts for model"),
        (["vllm", "serve", "--port", "8000"], "no model"),
        (serve("-tp", "16"), "needs 16 GPUs here; 8 are visible"),
        (serve("-tp", "4", "-dp", "4"), "needs 16 GPUs here; 8 are visible"),
        (serve("-tp", "0"), "--tensor-parallel-size must be >= 1"),
        (serve("--gpu-memory-utilization", "1.5"), "--gpu-memory-utilization must be in (0, 1]"),
        (serve("--speculative-config", "{mtp}"), "--speculative-config: not JSON"),
        (serve("-tp", "abc"), "invalid int value"),
    ],
)
def test_what_a_simulated_server_cannot_stand_in_for_is_refused_naming_why(argv: list[str], reason: str):
    with pytest.raises(ProtocolError, match=r"spec\.argv: simulated server") as refused:
        H200.plan_for(argv, {}, ())
    assert refused.value.code == "bad_params" and reason in refused.value.message


def test_the_visible_gpus_come_from_cuda_visible_devices_then_the_spec_then_all():
    argv = serve("-tp", "2")
    assert H200.plan_for(argv, {"CUDA_VISIBLE_DEVICES": "6,7"}, (0, 1, 2))["gpus"] == [6, 7]
    assert H200.plan_for(argv, {}, (4, 5, 6))["gpus"] == [4, 5]
    assert H200.plan_for(argv, {}, ())["gpus"] == [0, 1]
    with pytest.raises(ProtocolError, match=r"spec.env.CUDA_VISIBLE_DEVICES: .* GPU 8 does not exist on this simul"):
        H200.plan_for(argv, {"CUDA_VISIBLE_DEVICES": "8,9"}, ())
    with pytest.raises(ProtocolError, match=r"spec.gpus: .* GPU 12 does not exist on this simulated server"):
        H200.plan_for(argv, {}, (12,))


def test_dp_across_nodes_head_and_headless_node_read_their_part_from_the_argv():
    common = ["-tp", "1", "-dp", "16", "--enable-expert-parallel", "--data-parallel-size-local", "8"]
    common += ["--data-parallel-address", "10.0.0.1", "--data-parallel-rpc-port", "13345"]
    head = parse_vllm_serve(serve(*common, "--port", "8123"))
    worker = parse_vllm_serve(serve(*common, "--data-parallel-start-rank", "8", "--headless"))
    assert (head.nnodes, head.node_rank, head.port, head.early_ports) == (2, 0, 8123, (("10.0.0.1", 13345),))
    assert (worker.nnodes, worker.node_rank, worker.port, worker.early_ports) == (2, 1, None, ())
    plan = H200.plan_for(serve(*common, "--data-parallel-start-rank", "8", "--headless"), {}, range(8))
    assert plan["data_parallel_local"] == 8 and plan["data_parallel_start_rank"] == 8
    assert plan["data_parallel_size"] == 16 and plan["nnodes"] == 2 and plan["port"] is None


def test_a_replica_across_nodes_holds_its_share_of_gpus_and_only_its_head_opens_the_master_port():
    common = ["--tensor-parallel-size", "8", "--pipeline-parallel-size", "2", "--nnodes", "2"]
    common += ["--master-addr", "10.0.0.1", "--master-port", "29500"]
    head = parse_vllm_serve(serve(*common, "--node-rank", "0"))
    worker = parse_vllm_serve(serve(*common, "--node-rank=1", "--headless"))
    assert head.gpus_needed == worker.gpus_needed == 8
    assert head.early_ports == (("10.0.0.1", 29500),) and worker.early_ports == ()
    defaults = parse_vllm_serve(serve("-tp", "8", "-pp", "2", "--nnodes", "2", "--master-addr", "10.0.0.1"))
    assert defaults.early_ports == (("10.0.0.1", 29501),)  # vLLM's default master port
    dp_defaults = parse_vllm_serve(serve("-dp", "16", "-dpl", "8", "-dpa", "10.0.0.1"))
    assert dp_defaults.early_ports == (("10.0.0.1", 29550),)  # and data-parallel RPC port
    plan = H200.plan_for(serve(*common, "--node-rank", "1", "--headless"), {}, ())
    assert plan["nnodes"] == 2 and plan["seed"] == 1 and plan["gpus"] == list(range(8))


def test_flags_are_read_as_vllm_reads_them_with_dashes_or_underscores_and_equals():
    parsed = parse_vllm_serve(["vllm", "serve", "--model=" + V32, "--max_model_len=4096", "-tp=2"])
    assert (parsed.model, parsed.max_model_len, parsed.tensor_parallel) == (V32, 4096, 2)
    assert parse_vllm_serve(serve("--served-model-name", "ds", "alias")).served_model_name == "ds"
    mtp = parse_vllm_serve(serve("--speculative-config", '{"method":"mtp","num_speculative_tokens":3}'))
    assert mtp.speculative_tokens == 3
    assert parse_vllm_serve(serve("--speculative-config", '{"method":"ngram"}')).speculative_tokens == 0


def test_the_numbers_follow_the_flags_as_vllm_s_would():
    base = ["-tp", "8", "--max-model-len", "16384"]
    plain = H200.plan_for(serve(*base, "--gpu-memory-utilization", "0.85"), {}, ())
    more = H200.plan_for(serve(*base, "--gpu-memory-utilization", "0.95"), {}, ())
    fp8 = H200.plan_for(serve(*base, "--gpu-memory-utilization", "0.85", "--kv-cache-dtype", "fp8_ds_mla"), {}, ())
    mtp_config = '{"method":"mtp","num_speculative_tokens":3}'
    mtp = H200.plan_for(serve(*base, "--gpu-memory-utilization", "0.85", "--speculative-config", mtp_config), {}, ())
    assert more["kv_tokens"] > plain["kv_tokens"] and more["weights_bytes"] == plain["weights_bytes"]
    assert fp8["kv_tokens"] > plain["kv_tokens"] * 1.5  # 656 + 132 bytes a token a layer instead of 1152 + 132
    assert mtp["weights_bytes"] > plain["weights_bytes"] and mtp["kv_tokens"] < plain["kv_tokens"]
    defaulted = H200.plan_for(serve("-tp", "8"), {}, ())
    assert defaulted["max_model_len"] == 163840  # the model's own maximum, as vLLM takes it


def test_pipeline_stages_split_layers_as_vllm_does():
    assert stage_layer_counts(61, 1) == [61]
    assert stage_layer_counts(61, 2) == [31, 30]
    assert stage_layer_counts(61, 4) == [15, 15, 16, 15]
    assert stage_layer_counts(61, 8) == [7, 7, 8, 8, 8, 8, 8, 7]
    assert sum(stage_layer_counts(61, 7)) == 61


@settings(deadline=None, max_examples=300)
@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2]),
    dp=st.sampled_from([1, 2, 4, 8]),
    ep=st.booleans(),
    utilization=st.floats(0.05, 1.0),
    max_model_len=st.one_of(st.none(), st.integers(1, 200_000)),
    kv_dtype=st.sampled_from(["auto", "bfloat16", "fp8", "fp8_ds_mla"]),
    model=st.sampled_from([V32, "deepseek-ai/DeepSeek-V3"]),
    gpu=st.sampled_from(["8xH200", "8xH100", "8xB200", "8xA100", "8xL40S"]),
)
def test_every_plan_a_simulated_server_derives_is_one_its_stand_in_runs(
    tp: int, pp: int, dp: int, ep: bool, utilization: float, max_model_len: int | None, kv_dtype: str, model: str,
    gpu: str,
):  # fmt: skip
    chooser = StandInChooser(parse_simulate(gpu))
    argv = serve("-tp", str(tp), "-pp", str(pp), "-dp", str(dp), "--gpu-memory-utilization", f"{utilization:.3f}",
                 "--kv-cache-dtype", kv_dtype, model=model)  # fmt: skip
    argv += ["--enable-expert-parallel"] if ep else []
    argv += ["--max-model-len", str(max_model_len)] if max_model_len else []
    if tp * pp * dp > 8:
        with pytest.raises(ProtocolError, match="visible"):
            chooser.plan_for(argv, {}, ())
        return
    plan = chooser.plan_for(argv, {}, ())
    checked = validate_simulate(plan, 8)
    assert checked["kv_tokens"] % checked["block_size"] == 0 and checked["kv_tokens"] >= 0
    assert checked["kv_cache_bytes"] >= 0 and checked["weights_bytes"] > 0
    assert checked["max_concurrency"] == pytest.approx(
        checked["kv_tokens"] / checked["block_size"] / -(-checked["max_model_len"] // checked["block_size"])
    )
    assert len(checked["gpus"]) == tp * pp * dp
