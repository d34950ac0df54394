"""`meshdeck plan --gpu MI300X` end to end: AMD Instinct GPUs are accepted, listed in --help, and keep the JSON contract."""

from __future__ import annotations

import json

import pytest
from meshdeck.cli import main

CLUSTER_KEYS_BEFORE_AMD = {
    "nodes",
    "gpus_per_node",
    "gpu",
    "gpu_memory_gib",
    "torch_visible_gib",
    "intra_node_link",
    "inter_node_gbps",
}


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _json(capsys, *argv: str) -> dict:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert (code, err) == (0, "")
    return json.loads(out)


@pytest.mark.parametrize("name", ["MI300X", "MI325X", "MI355X"])
def test_plan_accepts_an_amd_gpu_and_keeps_every_json_field_an_nvidia_plan_has(capsys, name):
    amd = _json(capsys, "--gpu", name, "--vllm-version", "0.33")
    nvidia = _json(capsys, "--gpu", "H200-SXM-141GB", "--vllm-version", "0.33")
    assert set(amd) == set(nvidia)
    assert set(amd["cluster"]) == set(nvidia["cluster"]) >= CLUSTER_KEYS_BEFORE_AMD
    assert set(amd["settings"]) == set(nvidia["settings"])
    assert amd["layouts"] and set(nvidia["layouts"][0]) <= set(amd["layouts"][0])
    cluster = amd["cluster"]
    assert (cluster["gpu"], cluster["intra_node_link"], cluster["gpu_vendor"]) == (name, "xgmi", "amd")
    assert nvidia["cluster"]["gpu_vendor"] == "nvidia" and nvidia["cluster"]["fp8_dtype"] == "float8_e4m3fn"
    assert amd["settings"]["attention_backend"] == "ROCM_AITER_MLA_SPARSE"
    top = amd["layouts"][0]
    assert top["fits"] and top["supported"]
    assert set(top["traffic_bytes_per_token_by_link"]) <= {"xgmi"}
    assert any("vLLM on ROCm" in note for note in amd["notes"])


def test_mi300x_plans_tp8_of_deepseek_v32_with_fnuz_fp8(capsys):
    payload = _json(
        capsys, "--gpu", "MI300X", "--vllm-version", "0.33", "--tensor-parallel", "8", "--data-parallel", "1"
    )
    assert payload["cluster"]["fp8_dtype"] == "float8_e4m3fnuz"
    assert payload["cluster"]["torch_visible_gib"] == 191.98
    tp8 = next(layout for layout in payload["layouts"] if not layout["expert_parallel"])
    assert tp8["fits"] and tp8["weights_gib_by_component"]["rocm_row_padding"] == pytest.approx(0.369, abs=0.001)


def test_help_lists_the_amd_gpus_and_the_infinity_fabric_link(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    gpu_help = help_text.split("--gpu GPU ", 1)[1].split(" (resources/gpus.json)", 1)[0]
    assert gpu_help.split(" | ")[-3:] == ["MI300X", "MI325X", "MI355X"]
    assert "H200-SXM-141GB" in gpu_help
    assert "--intra-node-link INTRA_NODE_LINK nvlink | xgmi | pcie" in help_text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpu", "MI999X"], "meshdeck: error: --gpu: unknown GPU 'MI999X'; allowed: "),
        (
            ["--gpu", "MI300X", "--intra-node-link", "nvlink"],
            "meshdeck: error: --intra-node-link: MI300X has no NVLink",
        ),
        (
            ["--gpu", "MI300X", "--intra-node-link", "ib"],
            "meshdeck: error: --intra-node-link: 'ib'; allowed: nvlink, xgmi",
        ),
        (
            ["--gpu", "MI355X", "--kv-cache-dtype", "fp8_ds_mla"],
            "meshdeck: error: --kv-cache-dtype: fp8_ds_mla is a CUDA FlashMLA cache format",
        ),
    ],
)
def test_a_bad_amd_setting_exits_2_with_one_line_naming_the_flag(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert (code, out) == (2, "")
    assert len(err.strip().splitlines()) == 1 and err.startswith(message)
    if argv[1] == "MI999X":
        assert "MI300X, MI325X, MI355X" in err


def test_a_release_before_0_18_says_v32_needs_block_size_1_on_rocm(capsys):
    payload = _json(capsys, "--gpu", "MI300X", "--vllm-version", "0.16")
    assert payload["layouts"] and not any(layout["supported"] for layout in payload["layouts"])
    assert "rocm_sparse_block_size" in payload["layouts"][0]["warning_codes"]


def test_the_default_release_runs_v32_on_rocm_without_block_size_1(capsys):
    payload = _json(capsys, "--gpu", "MI300X")  # --vllm-version defaults to the newest modelled (0.33)
    assert any(layout["supported"] for layout in payload["layouts"])
    assert not any("rocm_sparse_block_size" in layout["warning_codes"] for layout in payload["layouts"])
