"""`vllm.extra_args` cannot override what the launcher decides (launch.profile.LAUNCHER_FLAGS): vLLM takes the
last flag given, so `--port 9000` after meshdeck's `--port 8000` ran the API on 9000 while the readiness check,
the pre-flight port check and the serving URL watched 8000 (and `--tensor-parallel-size` ran another layout than
the plan). Such a flag — spelled as vLLM's parser reads it: `--port=9000`, `--tensor_parallel_size`, `-tp`, an
abbreviation such as `--tensor-parallel` — is refused naming `vllm.extra_args[i]` and the field to set instead.
Replacing a flag meshdeck passes for the model (a V3.2 parser) is legitimate, and the plan warns about it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from launch_builders import make_node, make_profile
from meshdeck.cli import main
from meshdeck.core.errors import InputError
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.profile import load_profile
from meshdeck.launch.vllm_flags import flag_values

PROFILE = """\
name: ds32
model: deepseek-ai/DeepSeek-V3.2
hosts: [gpu-a]
gpus_per_node: 8
layout: {tensor_parallel: 8}
vllm: {port: 8000, extra_args: [--enforce-eager, --port, "9000"]}
"""


@pytest.mark.parametrize(
    ("extra_args", "index", "instead"),
    [
        (["--enforce-eager", "--port", "9000"], 1, "set vllm.port instead"),
        (["--port=9000"], 0, "set vllm.port instead"),
        (["--host", "127.0.0.1"], 0, "at the head's address"),
        (["--model", "other/model"], 0, "the profile's `model`"),
        (["-tp", "4"], 0, "set layout.tensor_parallel instead"),
        (["--tensor_parallel_size", "4"], 0, "set layout.tensor_parallel instead"),
        (["--tensor-parallel", "4"], 0, "set layout.tensor_parallel instead"),  # argparse's abbreviation
        (["--max-model-len", "4096"], 0, "set vllm.max_model_len instead"),
        (["--served-model-name", "x", "--node-rank", "1"], 2, "on each node from the layout"),
        (["--data-parallel-address=10.0.0.9"], 0, "on each node from the layout"),
    ],
)
def test_a_flag_the_launcher_decides_is_refused_naming_its_index(
    extra_args: list[str], index: int, instead: str
) -> None:
    with pytest.raises(InputError) as info:
        make_profile(vllm={"extra_args": extra_args})
    assert info.value.field == f"profile: vllm.extra_args[{index}]"
    assert "would override the launcher" in info.value.problem and instead in info.value.problem


def test_import_and_launch_refuse_the_file_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ds32.yaml"
    path.write_text(PROFILE)
    expected = f"meshdeck: error: {path}: vllm.extra_args[1]: --port would override the launcher"
    assert main(["--db", str(tmp_path / "m.db"), "profiles", "import", str(path)]) == 2
    assert capsys.readouterr().err.startswith(expected)
    assert main(["--db", str(tmp_path / "m.db"), "launch", str(path), "--dry-run"]) == 2
    assert capsys.readouterr().err.startswith(expected)


TWO = [make_node("gpu-a", "10.0.0.1"), make_node("gpu-b", "10.0.0.2")]
LAYOUTS: dict[str, tuple[dict[str, Any], list[Any]]] = {
    "single-node": ({}, TWO[:1]),
    "multi-node-mp": ({"hosts": ["gpu-a", "gpu-b"], "layout": {"tensor_parallel": 8, "pipeline_parallel": 2}}, TWO),
    "dp-multi-node": ({"hosts": ["gpu-a", "gpu-b"], "layout": {"tensor_parallel": 8, "data_parallel": 2}}, TWO),
    "ray": (
        {"hosts": ["gpu-a", "gpu-b"], "layout": {"tensor_parallel": 8, "pipeline_parallel": 2},
         "vllm": {"distributed_backend": "ray"}},
        TWO,
    ),
}  # fmt: skip


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_readiness_preflight_and_url_watch_the_port_the_api_runs_on(layout: str) -> None:
    overrides, nodes = dict(LAYOUTS[layout][0]), LAYOUTS[layout][1]
    vllm = {**overrides.pop("vllm", {}), "port": 9100, "extra_args": ["--enforce-eager"]}
    plan = build_launch_plan(make_profile(**overrides, vllm=vllm), nodes, run_id="r1")
    assert plan.layout_class == layout
    (serving,) = [c for c in plan.commands if c.name == plan.serving_command]
    runs_on = int(flag_values(list(serving.argv[3:]))["--port"] or 0)
    watched = {check.port for check in plan.serving_ready if check.kind == "tcp"}
    assert runs_on == 9100 and watched == {runs_on}
    assert [p.port for p in plan.ports if p.purpose == "vLLM API"] == [runs_on]
    assert plan.serving_url.endswith(f":{runs_on}/v1")


def test_replacing_a_flag_meshdeck_passes_for_the_model_is_allowed_and_warned_about() -> None:
    profile = make_profile(
        vllm={
            "speculative_mtp": True,
            "extra_args": ["--reasoning-parser", "mine", "--speculative-config.method", "ngram"],
        }
    )
    plan = build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1")], run_id="r1")
    assert plan.commands[0].argv[-4:] == ("--reasoning-parser", "mine", "--speculative-config.method", "ngram")
    assert (
        "vllm.extra_args[0]: --reasoning-parser replaces meshdeck's deepseek_v3 (vLLM takes the last one given)"
        in plan.warnings
    )
    assert any(w.startswith("vllm.extra_args[2]: --speculative-config replaces meshdeck's {") for w in plan.warnings)


def test_an_ambiguous_abbreviation_is_left_to_vllm_to_refuse() -> None:
    assert load_profile(PROFILE.replace('--port, "9000"', '--po, "9000"')).vllm.extra_args[1] == "--po"
