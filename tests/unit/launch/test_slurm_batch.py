"""The Slurm batch script and its options, and the squeue/sacct/sinfo parsers, on plain text."""

from __future__ import annotations

import shlex

import pytest
from meshdeck.core.errors import InputError
from meshdeck.core.slurm_state import gres_gpus, parse_sacct, parse_squeue_json, parse_squeue_text
from meshdeck.launch.build import parse_layout_spec
from meshdeck.launch.slurm_batch import build_batch_script
from meshdeck.launch.slurm_options import slurm_options
from meshdeck.services.deployments.local import workload_profile


def _script(**options: str) -> str:
    profile = workload_profile("collectives", parse_layout_spec("dp=2"), ["a", "b"], master_port=29500)
    return build_batch_script(profile, slurm_options(job_name="job", **options), run_id="r1").text


def test_the_script_asks_one_task_per_node_with_the_profiles_gpus() -> None:
    text = _script(partition="gpu", account="proj", qos="high", time_limit="1-02:00:00")
    for line in ("--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=1", "--partition=gpu", "--account=proj",
                 "--qos=high", "--time=1-02:00:00", "--job-name=job"):  # fmt: skip
        assert f"#SBATCH {line}\n" in text
    srun = shlex.split(text[text.index("\nsrun ") + 1 :])
    assert srun[:7] == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "bash", "-c"]


def test_each_rank_branch_reads_only_the_head_and_its_own_address_from_the_shell() -> None:
    task = shlex.split(_script().split("srun ", 1)[1])[-1]
    branch1 = task.split("\n1) ", 1)[1].split("\n*) ")[0]
    assert '--rdzv-endpoint "${MESHDECK_SLURM_HEAD_ADDR}":29500' in branch1
    assert '--local-addr "${MESHDECK_SLURM_NODE_ADDR}"' in branch1
    assert ".invalid" not in task


@pytest.mark.parametrize(
    ("option", "value"),
    [("partition", "a b"), ("account", "x\ny"), ("qos", "'q'"), ("time_limit", "5 min"), ("time_limit", "0"),
     ("output", "out file")],
)  # fmt: skip
def test_a_bad_option_is_refused_naming_it(option: str, value: str) -> None:
    flag = {"time_limit": "--time", "output": "--slurm-output"}.get(option, f"--{option}")
    with pytest.raises(InputError, match=flag):
        slurm_options(job_name="job", **{option: value})


def test_squeue_json_of_22_05_and_of_later_releases_read_alike() -> None:
    old = '{"jobs": [{"job_id": 7, "job_state": "PENDING", "state_reason": "Resources", "nodes": "", "node_count": 3}]}'
    new = ('{"jobs": [{"job_id": 7, "job_state": ["PENDING"], "state_reason": "Resources", "nodes": "",'
           ' "node_count": {"set": true, "infinite": false, "number": 3}}]}')  # fmt: skip
    assert parse_squeue_json(old) == parse_squeue_json(new)
    assert parse_squeue_json(old)[0].reason == "Resources"


def test_bad_squeue_values_name_the_field() -> None:
    with pytest.raises(InputError, match=r"jobs\[0\].job_state"):
        parse_squeue_json('{"jobs": [{"job_id": 1, "job_state": "DANCING"}]}')
    with pytest.raises(InputError, match="squeue line 1"):
        parse_squeue_text("12|RUNNING|None")


def test_sacct_lines_give_final_states_and_skip_steps() -> None:
    text = "12|CANCELLED by 0|2|node[1-2]|debug|job\n12.batch|CANCELLED|1|node1||batch\n13|TIMEOUT|1|node1|debug|j\n"
    jobs = parse_sacct(text)
    assert [(j.job_id, j.state, j.reason, j.final) for j in jobs] == [
        (12, "CANCELLED", "by 0", True),
        (13, "TIMEOUT", None, True),
    ]


@pytest.mark.parametrize(
    ("gres", "gpus"), [("gpu:8", 8), ("gpu:h100:8(S:0-1)", 8), ("gpu:a100:4,gpu:h100:2", 6), ("(null)", 0)]
)
def test_gpus_per_node_from_gres(gres: str, gpus: int) -> None:
    assert gres_gpus(gres) == gpus
