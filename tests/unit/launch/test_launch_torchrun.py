"""torchrun commands: c10d rendezvous on the head, layout env for the ranks, built-in workloads shipped inline."""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from importlib import resources

import pytest
from launch_builders import make_node, make_profile
from meshdeck.core.errors import InputError
from meshdeck.launch.build import build_launch_plan, parse_layout_spec
from meshdeck.launch.torch_launch import BUNDLE_ENV, BUNDLE_SHA_ENV, STAGER, workload_bundle


def torch_profile(**overrides):
    base = {
        "engine": "torch",
        "hosts": ["gpu-a", "gpu-b"],
        "gpus_per_node": 2,
        "layout": {"tensor_parallel": 2, "pipeline_parallel": 2},
        "torch": {"script": "tiny-deepseek", "master_port": 29400},
    }
    base.update(overrides)
    return make_profile(**base)


def nodes():
    return [make_node("gpu-a", "10.0.0.1", ib=1), make_node("gpu-b", "10.0.0.2")]


def test_every_node_runs_torchrun_with_c10d_on_the_head() -> None:
    plan = build_launch_plan(torch_profile(), nodes(), run_id="ds32-run7")
    head, worker = plan.commands
    for rank, command in enumerate(plan.commands):
        cut = command.argv.index("--")
        args = list(command.argv[4:cut])  # python -c STAGER ENTRY <torchrun args> -- <workload args>
        assert args[args.index("--nnodes") + 1] == "2"
        assert args[args.index("--nproc-per-node") + 1] == "2"
        assert args[args.index("--node-rank") + 1] == str(rank)
        assert args[args.index("--rdzv-backend") + 1] == "c10d"
        assert args[args.index("--rdzv-endpoint") + 1] == "10.0.0.1:29400"
        assert args[args.index("--rdzv-id") + 1] == "ds32-run7"
        assert args[args.index("--rdzv-conf") + 1] == f"is_host={1 if rank == 0 else 0}"
        assert args[args.index("--max-restarts") + 1] == "0"  # the agent owns restarts
    assert head.argv[3] == "tiny_deepseek.py"  # the entry file, then torchrun's args
    assert (head.stage, worker.stage) == (0, 1)
    assert head.ready[0].kind == "tcp" and head.ready[0].port == 29400
    assert plan.ports[0].port == 29400
    assert plan.serving_ready[0].count == 4  # every rank says it is running


def test_ranks_get_the_layout_as_documented_env_vars() -> None:
    profile = torch_profile(layout={"tensor_parallel": 1, "data_parallel": 4, "expert_parallel": True})
    for command in build_launch_plan(profile, nodes(), run_id="r").commands:
        env = command.env_dict
        assert env["MESHDECK_TENSOR_PARALLEL"] == "1"
        assert env["MESHDECK_PIPELINE_PARALLEL"] == "1"
        assert env["MESHDECK_DATA_PARALLEL"] == "4"
        assert env["MESHDECK_EXPERT_PARALLEL"] == "1"
    head_env, worker_env = (c.env_dict for c in build_launch_plan(profile, nodes(), run_id="r").commands)
    assert head_env["NCCL_IB_HCA"] == "=mlx5_0:1" and worker_env["NCCL_IB_DISABLE"] == "1"


def test_a_builtin_workload_travels_with_the_command_and_is_verified() -> None:
    (head, _) = build_launch_plan(torch_profile(), nodes(), run_id="r").commands
    assert head.argv[:3] == ("python3", "-c", STAGER)
    blob = head.env_dict[BUNDLE_ENV]
    assert head.env_dict[BUNDLE_SHA_ENV] == hashlib.sha256(blob.encode()).hexdigest()
    files = json.loads(zlib.decompress(base64.b64decode(blob)))
    package = resources.files("meshdeck.workloads")
    assert set(files) == {"tiny_deepseek.py", "tiny_deepseek_model.py", "layout_mesh.py"}
    for name, text in files.items():
        assert text == (package / name).read_text(encoding="utf-8")
    assert {f.name for f in head.staged} == set(files)
    compile(STAGER, "<stager>", "exec")  # it is real Python


def test_a_user_script_runs_directly_from_its_path_on_the_servers() -> None:
    profile = torch_profile(
        torch={"script": "/srv/train.py", "args": ["--steps", "10"], "python": "/opt/py/bin/python"}
    )
    head, _ = build_launch_plan(profile, nodes(), run_id="r").commands
    assert head.argv[:3] == ("/opt/py/bin/python", "-m", "torch.distributed.run")
    assert head.argv[-3:] == ("/srv/train.py", "--steps", "10")
    assert BUNDLE_ENV not in head.env_dict
    assert build_launch_plan(profile, nodes(), run_id="r").serving_ready == ()


def test_bad_run_ids_and_unknown_workloads_are_refused() -> None:
    with pytest.raises(InputError, match="run_id"):
        build_launch_plan(torch_profile(), nodes(), run_id="a b")
    with pytest.raises(InputError, match="not a built-in workload"):
        workload_bundle("resnet")


def test_layout_spec_parsing() -> None:
    layout = parse_layout_spec("tp=2,pp=1,dp=2")
    assert (layout.tensor_parallel, layout.pipeline_parallel, layout.data_parallel) == (2, 1, 2)
    assert parse_layout_spec("dp=2, ep").expert_parallel
    for bad in ("tp=0", "tp=x", "zz=2", "ep=maybe", "tp=5000"):
        with pytest.raises(InputError, match="--layout"):
            parse_layout_spec(bad)
