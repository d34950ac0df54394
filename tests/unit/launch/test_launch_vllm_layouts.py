"""Dry runs for every layout class in VLLM-FACTS.md, compared flag by flag with the commands in vLLM's
documentation and the vLLM DeepSeek recipes.

Reference commands, transcribed from:
  [recipe-v32]  vllm-project/recipes DeepSeek/DeepSeek-V3_2.md ("Launching DeepSeek-V3.2")
  [recipe-exp]  vllm-project/recipes DeepSeek/DeepSeek-V3_2-Exp.md ("Serving on 8xH200 (or H20) GPUs")
  [docs-dp]     vllm-project/vllm docs/serving/data_parallel_deployment.md ("Internal Load Balancing")
  [docs-scale]  vllm-project/vllm docs/serving/parallelism_scaling.md ("Running vLLM with MultiProcessing",
                "Running vLLM on a Ray cluster")
  [facts]       shared/data/VLLM-FACTS.md ("Launch flags")
Our commands may add flags (settings the profile makes explicit, V3.2 parsers), never drop or change one.
"""

from __future__ import annotations

import shlex

import pytest
from launch_builders import make_node, make_profile
from meshdeck.core.errors import InputError
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.plan import LaunchPlan, NodeCommand
from meshdeck.launch.vllm_flags import flag_values
from meshdeck.launch.vllm_launch import is_deepseek_v4, is_deepseek_v32

# Flags meshdeck may add on top of a reference command, each for a reason the profile states.
ALLOWED_EXTRAS = {
    "--gpu-memory-utilization",  # always explicit (the planner's budget)
    "--max-model-len",  # the profile's context
    "--port",  # the profile's API port
    "--master-port",  # explicit so pre-flight can check it
    "--tokenizer-mode",
    "--tool-call-parser",
    "--enable-auto-tool-choice",
    "--reasoning-parser",  # V3.2 frontend ([facts])
}
# Extras that restate vLLM's default (the planner's flags always name the tensor-parallel size).
DEFAULT_VALUED = {"--tensor-parallel-size": "1"}


def reference(command: str) -> tuple[str, dict[str, str | None]]:
    """(model, canonical flag -> value) of a documented `vllm serve MODEL ...` line."""
    argv = shlex.split(command)
    assert argv[:2] == ["vllm", "serve"]
    return argv[2], flag_values(argv[3:])


def ours(command: NodeCommand) -> tuple[str, dict[str, str | None]]:
    assert command.argv[1] == "serve"
    return command.argv[2], flag_values(list(command.argv[3:]))


def assert_matches(command: NodeCommand, documented: str, *, model_placeholder: str | None = None) -> None:
    doc_model, doc_flags = reference(documented)
    our_model, our_flags = ours(command)
    if model_placeholder is None:
        assert our_model == doc_model
    for flag, value in doc_flags.items():
        assert flag in our_flags, f"{flag} from the documented command is missing: {command.argv}"
        assert our_flags[flag] == value, f"{flag}: documented {value!r}, ours {our_flags[flag]!r}"
    extras = {f for f in set(our_flags) - set(doc_flags) if DEFAULT_VALUED.get(f, object()) != our_flags[f]}
    assert extras <= ALLOWED_EXTRAS, f"unexplained extra flags {extras - ALLOWED_EXTRAS}"


def vllm_commands(plan: LaunchPlan) -> list[NodeCommand]:
    return [c for c in plan.commands if c.argv[1] == "serve"]


def test_single_node_tensor_parallel_matches_the_v32_recipe() -> None:
    profile = make_profile(layout={"tensor_parallel": 8}, vllm={"max_model_len": None})
    plan = build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1")], run_id="r1")
    assert plan.layout_class == "single-node"
    (command,) = plan.commands
    assert_matches(
        command,
        "vllm serve deepseek-ai/DeepSeek-V3.2 --tensor-parallel-size 8 --tokenizer-mode deepseek_v32 "
        "--tool-call-parser deepseek_v32 --reasoning-parser deepseek_v3",
    )
    assert "--enable-auto-tool-choice" in command.argv  # [facts]: the tool parser is used only with it


def test_single_node_dp8_with_expert_parallel_matches_the_exp_recipe() -> None:
    profile = make_profile(
        model="deepseek-ai/DeepSeek-V3.2-Exp",
        layout={"tensor_parallel": 1, "data_parallel": 8, "expert_parallel": True},
        vllm={"max_model_len": None},
    )
    (command,) = build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1")], run_id="r1").commands
    assert_matches(command, "vllm serve deepseek-ai/DeepSeek-V3.2-Exp -dp 8 --enable-expert-parallel")


def test_single_node_dp4_tp2_matches_the_data_parallel_docs() -> None:
    profile = make_profile(model="some/model", layout={"tensor_parallel": 2, "data_parallel": 4})
    (command,) = build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1")], run_id="r1").commands
    assert_matches(command, "vllm serve some/model --data-parallel-size 4 --tensor-parallel-size 2")


def test_single_node_pipeline_parallel_flags() -> None:
    profile = make_profile(layout={"tensor_parallel": 4, "pipeline_parallel": 2})
    (command,) = build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1")], run_id="r1").commands
    flags = ours(command)[1]
    assert flags["--tensor-parallel-size"] == "4"
    assert flags["--pipeline-parallel-size"] == "2"
    assert "--nnodes" not in flags and "--headless" not in flags


def test_multi_node_mp_matches_the_multiprocessing_docs() -> None:
    profile = make_profile(
        model="/path/to/the/model/in/the/container",
        hosts=["gpu-a", "gpu-b"],
        layout={"tensor_parallel": 8, "pipeline_parallel": 2},
    )
    nodes = [make_node("gpu-a", "10.0.0.1"), make_node("gpu-b", "10.0.0.2")]
    plan = build_launch_plan(profile, nodes, run_id="r1")
    assert plan.layout_class == "multi-node-mp"
    head, worker = vllm_commands(plan)
    assert_matches(
        head,
        "vllm serve /path/to/the/model/in/the/container --tensor-parallel-size 8 --pipeline-parallel-size 2 "
        "--nnodes 2 --node-rank 0 --master-addr 10.0.0.1",
    )
    assert_matches(
        worker,
        "vllm serve /path/to/the/model/in/the/container --tensor-parallel-size 8 --pipeline-parallel-size 2 "
        "--nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --headless",
    )
    assert (head.stage, worker.stage) == (0, 1)  # head first
    assert head.ready[0].kind == "tcp" and head.ready[0].port == 29501  # its master port opens early
    assert plan.serving_command == "vllm-node0"
    assert plan.restart_as_whole


def test_dp_across_nodes_matches_the_data_parallel_docs() -> None:
    profile = make_profile(
        model="some/model",
        hosts=["gpu-a", "gpu-b"],
        gpus_per_node=2,
        layout={"tensor_parallel": 1, "data_parallel": 4},
        vllm={"data_parallel_rpc_port": 13345},
    )
    nodes = [make_node("gpu-a", "10.99.48.128"), make_node("gpu-b", "10.99.48.129")]
    plan = build_launch_plan(profile, nodes, run_id="r1")
    assert plan.layout_class == "dp-multi-node"
    head, worker = vllm_commands(plan)
    assert_matches(
        head,
        "vllm serve some/model --data-parallel-size 4 --data-parallel-size-local 2 "
        "--data-parallel-address 10.99.48.128 --data-parallel-rpc-port 13345",
    )
    assert_matches(
        worker,
        "vllm serve some/model --headless --data-parallel-size 4 --data-parallel-size-local 2 "
        "--data-parallel-start-rank 2 --data-parallel-address 10.99.48.128 --data-parallel-rpc-port 13345",
    )


def test_dp16_over_two_8gpu_nodes_matches_the_facts_sheet() -> None:
    profile = make_profile(
        hosts=["gpu-a", "gpu-b"],
        layout={"tensor_parallel": 1, "data_parallel": 16, "expert_parallel": True},
    )
    nodes = [make_node("gpu-a", "10.0.0.1"), make_node("gpu-b", "10.0.0.2")]
    head, worker = vllm_commands(build_launch_plan(profile, nodes, run_id="r1"))
    # [facts]: node 0 `-dp 16 -dpl 8 -dpa IP -dpp PORT`, others add `--data-parallel-start-rank 8 --headless`
    assert_matches(
        head,
        "vllm serve deepseek-ai/DeepSeek-V3.2 -dp 16 -dpl 8 -dpa 10.0.0.1 -dpp 29550 --enable-expert-parallel",
    )
    assert_matches(
        worker,
        "vllm serve deepseek-ai/DeepSeek-V3.2 -dp 16 -dpl 8 -dpa 10.0.0.1 -dpp 29550 --enable-expert-parallel "
        "--data-parallel-start-rank 8 --headless",
    )
    assert "--port" in head.argv and "--port" not in worker.argv  # headless nodes serve no API


def test_ray_matches_the_ray_cluster_docs() -> None:
    profile = make_profile(
        model="/path/to/the/model/in/the/container",
        hosts=["gpu-a", "gpu-b"],
        layout={"tensor_parallel": 8, "pipeline_parallel": 2},
        vllm={"distributed_backend": "ray"},
    )
    nodes = [make_node("gpu-a", "10.0.0.1"), make_node("gpu-b", "10.0.0.2")]
    plan = build_launch_plan(profile, nodes, run_id="r1")
    assert plan.layout_class == "ray"
    ray_head, ray_worker, serve = plan.commands
    assert ray_head.argv[:4] == ("ray", "start", "--head", "--port=6379")  # [facts]
    assert "--block" in ray_head.argv
    assert ray_worker.argv[:4] == ("ray", "start", "--block", "--address=10.0.0.1:6379")  # [facts]
    assert [c.stage for c in plan.commands] == [0, 1, 2]
    assert serve.host == "gpu-a"
    assert_matches(
        serve,
        "vllm serve /path/to/the/model/in/the/container --tensor-parallel-size 8 --pipeline-parallel-size 2 "
        "--distributed-executor-backend ray",
    )
    assert ray_head.env_dict["VLLM_HOST_IP"] == "10.0.0.1"
    assert ray_worker.env_dict["VLLM_HOST_IP"] == "10.0.0.2"


def test_ray_uses_the_vllm_venv_for_ray() -> None:
    profile = make_profile(
        hosts=["gpu-a", "gpu-b"],
        layout={"tensor_parallel": 8, "pipeline_parallel": 2},
        vllm={"distributed_backend": "ray", "executable": "/opt/venv/bin/vllm"},
    )
    nodes = [make_node("gpu-a", "10.0.0.1"), make_node("gpu-b", "10.0.0.2")]
    plan = build_launch_plan(profile, nodes, run_id="r1")
    assert [c.argv[0] for c in plan.commands] == ["/opt/venv/bin/ray", "/opt/venv/bin/ray", "/opt/venv/bin/vllm"]


def test_ray_data_parallel_replicas_spanning_nodes_use_the_span_strategy() -> None:
    profile = make_profile(
        hosts=["gpu-a", "gpu-b", "gpu-c", "gpu-d"],
        layout={"tensor_parallel": 16, "data_parallel": 2},
        vllm={"distributed_backend": "ray"},
    )
    nodes = [make_node(h, f"10.0.0.{i + 1}") for i, h in enumerate(profile.hosts)]
    serve = build_launch_plan(profile, nodes, run_id="r1").commands[-1]
    flags = ours(serve)[1]
    assert flags["--data-parallel-backend"] == "ray" and flags["--data-parallel-size"] == "2"
    assert serve.env_dict["VLLM_RAY_DP_PACK_STRATEGY"] == "span"  # [docs-dp], Ray notes


def test_multi_node_replicas_with_data_parallel_on_mp_are_refused_with_the_way_out() -> None:
    profile = make_profile(
        hosts=["gpu-a", "gpu-b", "gpu-c", "gpu-d"], layout={"tensor_parallel": 16, "data_parallel": 2}
    )
    nodes = [make_node(h, f"10.0.0.{i + 1}") for i, h in enumerate(profile.hosts)]
    with pytest.raises(InputError, match="distributed_backend: ray"):
        build_launch_plan(profile, nodes, run_id="r1")


def test_replicas_that_would_straddle_nodes_are_refused() -> None:
    profile = make_profile(hosts=["gpu-a", "gpu-b"], gpus_per_node=6, layout={"tensor_parallel": 4, "data_parallel": 3})
    nodes = [make_node("gpu-a", "10.0.0.1"), make_node("gpu-b", "10.0.0.2")]
    with pytest.raises(InputError, match="straddle"):
        build_launch_plan(profile, nodes, run_id="r1")


def test_mtp_speculative_config_is_compact_json() -> None:
    profile = make_profile(vllm={"speculative_mtp": True})
    (command,) = build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1")], run_id="r1").commands
    assert ours(command)[1]["--speculative-config"] == '{"method":"mtp","num_speculative_tokens":3}'  # [facts]


def test_settings_become_flags_and_extra_args_come_last() -> None:
    profile = make_profile(
        vllm={"kv_cache_dtype": "fp8_ds_mla", "max_num_seqs": 256, "gpu_memory_utilization": 0.85, "port": 9000,
              "extra_args": ["--enable-eplb"]},
    )  # fmt: skip
    (command,) = build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1")], run_id="r1").commands
    flags = ours(command)[1]
    assert flags["--kv-cache-dtype"] == "fp8_ds_mla"
    assert flags["--max-num-seqs"] == "256"
    assert flags["--gpu-memory-utilization"] == "0.85"
    assert flags["--port"] == "9000"
    assert command.argv[-1] == "--enable-eplb"


def test_unknown_extra_args_are_warned_about_not_dropped() -> None:
    profile = make_profile(vllm={"extra_args": ["--no-such-flag", "--tokenizer-mode", "nonsense"]})
    plan = build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1")], run_id="r1")
    assert "--no-such-flag" in plan.commands[0].argv
    assert any("--no-such-flag" in w for w in plan.warnings)
    assert any("nonsense" in w for w in plan.warnings)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("deepseek-ai/DeepSeek-V3.2", True),
        ("deepseek-ai/DeepSeek-V3.2-Exp", True),
        ("/models/DeepSeek-V3_2", True),
        ("deepseek-ai/DeepSeek-V3", False),
        ("deepseek-ai/DeepSeek-V3.1", False),
        ("moonshotai/Kimi-K2-Thinking", False),
    ],
)
def test_v32_parser_flags_only_for_v32_models(model: str, expected: bool) -> None:
    assert is_deepseek_v32(model) is expected
    profile = make_profile(model=model)
    plan = build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1")], run_id="r1")
    assert ("--reasoning-parser" in plan.commands[0].argv) is expected
    assert any("does not name DeepSeek V3.2" in w for w in plan.warnings) is not expected


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("deepseek-ai/DeepSeek-V4-Pro", True),
        ("deepseek-ai/DeepSeek-V4-Flash", True),
        ("/models/DeepSeek-V4-Flash-Base/", True),
        ("deepseek-ai/DeepSeek-V4.1-Flash", False),  # DeepseekV41ForCausalLM: parsers of its own (deepseek_v41)
        ("deepseek-ai/DeepSeek-V3.2", False),
        ("moonshotai/Kimi-K2-Thinking", False),
    ],
)
def test_v4_parser_flags_only_for_v4_models(model: str, expected: bool) -> None:
    assert is_deepseek_v4(model) is expected
    profile = make_profile(model=model, vllm={"speculative_mtp": True})
    argv = list(build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1")], run_id="r1").commands[0].argv)
    values = flag_values(argv)
    assert (values.get("--tokenizer-mode") == "deepseek_v4") is expected
    assert (values.get("--reasoning-parser") == "deepseek_v4") is expected
    assert (values.get("--tool-call-parser") == "deepseek_v4") is expected
    # vLLM's V4-Pro recipe runs 2 MTP tokens (vllm-project/recipes PR 435); V3.2's recipe 3
    assert ('"num_speculative_tokens":2' in " ".join(argv)) is expected
