"""`meshdeck launch PROFILE --slurm-script`: the batch script the plan makes, printed or written, contacting
nothing; the Slurm options checked and refused where they would be ignored."""

from __future__ import annotations

from pathlib import Path

import pytest
from meshdeck.cli import main
from meshdeck.launch.profile import load_profile
from meshdeck.launch.slurm_batch import build_batch_script
from meshdeck.launch.slurm_options import slurm_options

PROFILE = Path(__file__).resolve().parents[3] / "examples" / "profiles" / "ds3-h100-2nodes-tp8-pp2.yaml"


def launch(tmp_path: Path, *extra: str) -> int:
    db = tmp_path / "never-created.db"
    code = main(["--db", str(db), "launch", str(PROFILE), *extra])
    assert not db.exists()  # contacts nothing, creates nothing
    return code


def test_the_script_printed_is_the_one_the_plan_makes_with_the_options_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert launch(tmp_path, "--slurm-script", "--partition", "gpu", "--qos", "high", "--time", "4:00:00") == 0
    printed = capsys.readouterr()
    options = slurm_options(job_name="ds3-h100-2nodes-tp8-pp2", partition="gpu", qos="high", time_limit="4:00:00")
    expected = build_batch_script(load_profile(PROFILE.read_text()), options, run_id="unused by vLLM plans").text
    assert printed.out == expected
    header = [line for line in printed.out.splitlines() if line.startswith("#SBATCH")]
    assert header == [
        "#SBATCH --job-name=ds3-h100-2nodes-tp8-pp2",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --partition=gpu",
        "#SBATCH --qos=high",
        "#SBATCH --time=4:00:00",
        "#SBATCH --output=meshdeck-%x-%j.out",
    ]
    assert "--node-rank 1" in printed.out and "--headless" in printed.out
    assert "does not name DeepSeek V3.2" in printed.err  # the plan's warnings go to stderr
    assert 'export NCCL_SOCKET_IFNAME="$node_if" GLOO_SOCKET_IFNAME="$node_if"' in printed.out  # chosen per node


def test_o_writes_the_script_and_says_how_to_submit_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "ds3.sbatch"
    assert launch(tmp_path, "--slurm-script", "-o", str(target), "--slurm-job-name", "ds3") == 0
    err = capsys.readouterr().err
    assert target.read_text().startswith("#!/bin/bash\n") and "#SBATCH --job-name=ds3\n" in target.read_text()
    assert f"wrote {target}" in err and "sbatch" in err


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--partition", "gpu"], "--partition: is for --slurm CLUSTER or --slurm-script only"),
        (["--time", "1:00:00", "--dry-run"], "--time: is for --slurm CLUSTER or --slurm-script only"),
        (["-o", "x.sbatch"], "-o: is for --k8s-manifest or --slurm-script only"),
        (["--slurm-script", "--dry-run"], "--slurm-script: starts nothing; --dry-run does not go with it"),
        (["--k8s-manifest", "--partition", "gpu"], "--partition: is for --slurm CLUSTER or --slurm-script only"),
        (["--k8s-manifest", "--slurm-script"], "--k8s-manifest: starts nothing; --slurm-script does not go with it"),
        (["--slurm-script", "--time", "a b"], "--time: 'a b' is not a Slurm time limit"),
        (["--slurm-script", "--time", "0:00"], "--time: '0:00' is no time at all"),
        (["--slurm-script", "--partition", "gpu;rm"], "--partition: 'gpu;rm' is not a partition name"),
        (["--slurm-script", "--k8s-name", "x"], "--k8s-name: is for --k8s-manifest only"),
    ],
)
def test_options_that_would_be_ignored_or_are_not_slurms_are_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], named: str
) -> None:
    assert launch(tmp_path, *extra) == 2
    assert named in capsys.readouterr().err
