"""`meshdeck plan` end to end through the real CLI entry point: JSON shape, table, and one-line errors."""

from __future__ import annotations

import itertools
import json

import pytest
from meshdeck.cli import main

REQUIRED_KEYS = {
    "tensor_parallel",
    "pipeline_parallel",
    "data_parallel",
    "expert_parallel",
    "gpus",
    "nodes",
    "fits",
    "weights_gib_per_gpu",
    "kv_cache_gib_per_gpu",
    "kv_bytes_per_token_per_gpu",
    "kv_tokens_per_replica",
    "kv_tokens_total",
    "max_concurrency",
    "est_decode_tokens_per_s",
    "warnings",
    "vllm_args",
}


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_lists_fitting_layouts_in_rank_order_with_every_issue_key(capsys):
    code, out, _ = run_cli(
        capsys, "--model", "deepseek-v3.2", "--gpu", "H200-SXM-141GB", "--nodes", "1", "--gpus-per-node", "8", "--json"
    )
    assert code == 0
    data = json.loads(out)
    layouts = data["layouts"]
    assert layouts, "8×H200 fits DeepSeek-V3.2"
    for layout in layouts:
        assert layout.keys() >= REQUIRED_KEYS
        assert layout["fits"] is True
        assert all(isinstance(w, str) for w in layout["warnings"])
        assert all(isinstance(a, str) for a in layout["vllm_args"])
    # practice first (documented, then PP inside an NVLink node, then DP × PP), then the serving estimate
    tiers = [2 if "dp_with_pp" in lay["warning_codes"] else int("pp_inside_nvlink_node" in lay["warning_codes"])
             for lay in layouts]  # fmt: skip
    assert tiers == sorted(tiers)
    documented = [lay for lay, tier in zip(layouts, tiers, strict=True) if tier == 0]
    for ahead, behind in itertools.pairwise(documented):
        ahead_rate, behind_rate = (lay["serving"]["output_tokens_per_s"] for lay in (ahead, behind))
        if ahead_rate < behind_rate:
            assert ahead["expert_parallel"] and ahead["rank_note"].startswith("ranked ahead of")
            assert ahead_rate >= 0.95 * behind_rate
    assert {lay["serving"]["source"] for lay in layouts} == {data["speed_source"]["label"]}


def test_calibration_point_through_the_cli_with_vllms_defaults(capsys):
    # RedHat's validation database (fixtures/calibration/SOURCES.md): vLLM 0.16.0, V3.2 TP8 on 8×H200, util 0.92,
    # max_model_len 8192, KV auto and vLLM's defaults otherwise -> "Model loading took 80.62 GiB",
    # "GPU KV cache size: 578,368 tokens".
    code, out, _ = run_cli(
        capsys, "--model", "deepseek-v3.2", "--gpu", "H200-SXM-141GB", "--nodes", "1", "--gpus-per-node", "8",
        "--gpu-memory-utilization", "0.92", "--max-model-len", "8192", "--tensor-parallel", "8",
        "--vllm-version", "0.16", "--json",
    )  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert data["settings"]["max_num_seqs"] == 1024 and data["settings"]["max_num_batched_tokens"] == 8192
    tp8 = next(
        lay
        for lay in data["layouts"]
        if (lay["tensor_parallel"], lay["pipeline_parallel"], lay["data_parallel"], lay["expert_parallel"])
        == (8, 1, 1, False)
    )
    assert tp8["weights_gib_per_gpu"] == pytest.approx(80.62, rel=0.01)
    assert tp8["kv_tokens_per_replica"] == pytest.approx(578_368, rel=0.02)
    assert "--max-num-seqs" not in tp8["vllm_args"]  # vLLM's default is what ran; nothing to pass


def test_all_adds_the_layouts_that_do_not_fit(capsys):
    _, fitting, _ = run_cli(capsys, "--gpu", "H100-SXM5-80GB", "--json")
    _, everything, _ = run_cli(capsys, "--gpu", "H100-SXM5-80GB", "--json", "--all")
    some, every = json.loads(fitting)["layouts"], json.loads(everything)["layouts"]
    assert len(every) > len(some)
    assert any(not layout["fits"] for layout in every)


def test_default_output_is_a_readable_table_naming_the_top_pick(capsys):
    code, out, _ = run_cli(capsys, "--gpu", "H200-SXM-141GB")
    assert code == 0
    assert "Top pick:" in out
    assert "TTFT ms" in out and "TPOT ms" in out and "tok/s/GPU" in out and "speed from measured kernels" in out
    assert "vllm serve <model> --tensor-parallel-size" in out


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--gpu", "Z100"], "--gpu"),
        (["--gpu", "H200-SXM-141GB", "--nodes", "0"], "--nodes"),
        (["--gpu", "H200-SXM-141GB", "--nodes", "two"], "--nodes"),
        (["--gpu", "H200-SXM-141GB", "--gpus-per-node", "-8"], "--gpus-per-node"),
        (["--gpu", "H200-SXM-141GB", "--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
        (["--gpu", "H200-SXM-141GB", "--kv-cache-dtype", "int8"], "--kv-cache-dtype"),
        (["--gpu", "H200-SXM-141GB", "--goal", "fastest"], "--goal"),
        (
            ["--gpu", "H200-SXM-141GB", "--tensor-parallel", "3", "--pipeline-parallel", "1", "--data-parallel", "1"],
            "--tensor-parallel",
        ),
        (["--gpu", "H200-SXM-141GB", "--max-model-len", "999999"], "--max-model-len"),
        (["--model", "/nonexistent/checkpoint", "--gpu", "H200-SXM-141GB"], "--model"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_field(capsys, argv, field):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"meshdeck: error: {field}")


def test_a_config_that_is_not_deepseek_is_refused_naming_architectures(capsys, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096}))
    code, _, err = run_cli(capsys, "--model", str(tmp_path), "--gpu", "H200-SXM-141GB")
    assert code == 2
    assert "architectures" in err and "DeepseekV3ForCausalLM" in err


def test_model_from_a_checkpoint_directory(capsys, tmp_path):
    from pathlib import Path

    config = Path(__file__).resolve().parents[2] / "resources" / "models" / "deepseek-v3.json"
    (tmp_path / "config.json").write_text(config.read_text())
    code, out, _ = run_cli(capsys, "--model", str(tmp_path), "--gpu", "H200-SXM-141GB", "--json", "--top", "1")
    assert code == 0
    assert json.loads(out)["model"]["source"].endswith("config.json")


def test_topology_from_an_agent_inventory_supplies_gpu_and_links(capsys, tmp_path):
    inventory = {
        "gpus": [{"index": i, "name": "NVIDIA H200", "memory_total_bytes": 150_754_820_096} for i in range(8)],
        "topology": {"matrix": [["X" if i == j else "NV18" for j in range(8)] for i in range(8)]},
        "nics": [
            {"name": f"mlx5_{i}/1", "kind": "infiniband", "rate_gbps": 400.0, "state": "ACTIVE"} for i in range(8)
        ],
    }
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(inventory))
    code, out, _ = run_cli(capsys, "--topology", str(path), "--nodes", "2", "--json", "--top", "1")
    assert code == 0
    data = json.loads(out)
    assert data["cluster"]["gpu"] == "H200-SXM-141GB"
    assert data["cluster"]["intra_node_link"] == "topology"
    assert data["cluster"]["inter_node_gbps"] == 3200.0


@pytest.mark.parametrize("nodes", [1, 2])
def test_plan_topology_of_an_agent_inventory_plans_on_the_cluster_the_console_would(tmp_path, nodes: int):
    """`plan --topology INVENTORY.json --nodes N` and the console's planner with N such hosts plan on one
    ClusterSpec (services.cluster.cluster_from_inventories): same GPU spec, matrix and inter-node bandwidth."""
    from meshdeck.cli import build_parser
    from meshdeck.commands.plan import build_request
    from meshdeck.services.cluster import cluster_from_inventories
    from meshdeck_agent.machine import build_machine
    from meshdeck_agent.wire_inventory import Inventory

    wire = build_machine("8xH200").inventory()
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(wire))
    cli = build_request(build_parser().parse_args(["plan", "--topology", str(path), "--nodes", str(nodes)])).cluster
    hosts = ["a", "b"][:nodes]
    console = cluster_from_inventories(dict.fromkeys(hosts, Inventory.from_wire(wire)), hosts).cluster
    assert cli == console and cli.topology is not None


def test_plan_topology_of_a_malformed_inventory_names_the_file_and_the_field(capsys, tmp_path):
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps({"gpus": [{"index": 0, "memory_total_bytes": "lots"}]}))
    code, out, err = run_cli(capsys, "--topology", str(path))
    assert code == 2 and out == ""
    assert err.startswith(f"meshdeck: error: --topology {path}: inventory.gpus[0].memory_total_bytes: must be")


def test_plan_topology_of_an_inventory_without_gpu_names_takes_the_gpu_flag(capsys, tmp_path):
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps({"gpus": [{"index": i} for i in range(8)]}))
    code, _, err = run_cli(capsys, "--topology", str(path), "--json")
    assert code == 2 and err.startswith("meshdeck: error: --topology: cannot tell the GPU model")
    code, out, _ = run_cli(capsys, "--topology", str(path), "--gpu", "H100-SXM5-80GB", "--json", "--top", "1")
    assert code == 0 and json.loads(out)["cluster"]["gpu"] == "H100-SXM5-80GB"


def test_nvidia_smi_topology_text_with_a_mismatched_gpu_count_is_refused(capsys):
    from pathlib import Path

    topo = Path(__file__).parent / "core" / "data" / "nvidia-smi_topo-m_pcie-only_5gpu_club3090-issue46.txt"
    code, _, err = run_cli(capsys, "--gpu", "RTX-4090", "--topology", str(topo), "--gpus-per-node", "8")
    assert code == 2 and err.startswith("meshdeck: error: --topology")


def test_train_mode_prints_zero_memory_and_traffic(capsys):
    code, out, _ = run_cli(
        capsys,
        "--engine",
        "torch",
        "--mode",
        "train",
        "--gpu",
        "H100-SXM5-80GB",
        "--nodes",
        "32",
        "--zero",
        "3",
        "--json",
    )
    assert code == 0
    layouts = json.loads(out)["layouts"]
    assert layouts and all(layout["zero_stage"] == 3 for layout in layouts)
    assert {
        "params_gib_per_gpu",
        "optimizer_gib_per_gpu",
        "activations_gib_per_gpu",
        "pipeline_bubble_fraction",
    } <= layouts[0].keys()
    assert layouts[0]["traffic_per_step"]


def test_make_run_command_reads_well(capsys):
    code, out, _ = run_cli(
        capsys, "--model", "deepseek-v3.2", "--gpu", "H200-SXM-141GB", "--nodes", "1", "--gpus-per-node", "8"
    )
    assert code == 0
    header = out.splitlines()[0]
    assert "deepseek-v3.2" in header and "H200-SXM-141GB" in header
    assert "note: est_decode_* numbers are the roofline's decode estimate" in out


def test_table_says_where_its_settings_and_order_come_from(capsys):
    code, out, _ = run_cli(capsys, "--model", "deepseek-v3", "--gpu", "H100-SXM5-80GB", "--nodes", "2")
    assert code == 0
    header = out.splitlines()[:2]
    assert "network 3,200 Gb/s per node, assumed — set --inter-node-gbps" in header[0]
    assert "max_num_seqs 1024 (vLLM default)" in header[1] and "est. at 4,096-token contexts" in header[1]
    assert "order: documented layouts first" in out
    assert "sequences of 4,096 tokens per replica" in out
    assert "are added at launch" in out  # a 2-node top pick: the printed flags are not the whole command
    _, given, _ = run_cli(capsys, "--gpu", "H200-SXM-141GB", "--max-num-seqs", "256", "--inter-node-gbps", "800")
    assert "max_num_seqs 256 (--max-num-seqs)" in given and "Gb/s per node" not in given  # one node: no network


def test_help_lists_exactly_the_kv_cache_dtypes_vllm_serves_deepseek_with(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    kv_help = help_text.split("--kv-cache-dtype KV_CACHE_DTYPE ", 1)[1].split(" (default", 1)[0]
    assert kv_help == "auto | bfloat16 | fp8 | fp8_e4m3 | fp8_ds_mla | nvfp4_ds_mla"


@pytest.mark.parametrize("value", ["fp8_e5m2", "bf16", "float16"])
def test_a_kv_cache_dtype_vllm_cannot_serve_is_refused_with_the_accepted_values(capsys, value):
    code, out, err = run_cli(capsys, "--gpu", "H200-SXM-141GB", "--kv-cache-dtype", value)
    assert (code, out) == (2, "")
    assert "--kv-cache-dtype" in err
    assert "auto, bfloat16, fp8, fp8_e4m3, fp8_ds_mla, nvfp4_ds_mla" in err


def test_fp8_ds_mla_on_deepseek_v3_is_refused_as_a_v32_format(capsys):
    code, _, err = run_cli(
        capsys, "--model", "deepseek-v3", "--gpu", "H200-SXM-141GB", "--kv-cache-dtype", "fp8_ds_mla"
    )
    assert code == 2
    assert "--kv-cache-dtype" in err and "V3.2" in err


@pytest.mark.parametrize(
    ("value", "per_layer"), [("fp8_e4m3", 576 + 132), ("fp8", 656 + 132), ("fp8_ds_mla", 656 + 132)]
)
def test_v32_on_h200_plans_the_bytes_vllm_stores_for_each_fp8_spelling(capsys, value, per_layer):
    argv = ["--model", "deepseek-v3.2", "--gpu", "H200-SXM-141GB", "--kv-cache-dtype", value, "--json"]
    code, out, _ = run_cli(capsys, *argv, "--tensor-parallel", "8", "--pipeline-parallel", "1")
    assert code == 0
    layout = json.loads(out)["layouts"][0]
    assert layout["kv_bytes_per_token_per_gpu"] == 61 * per_layer
