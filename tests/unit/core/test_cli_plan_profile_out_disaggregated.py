"""`meshdeck plan --disaggregated --profile-out`: the chosen prefill/decode plan as one launchable profile."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from meshdeck.cli import main
from meshdeck.launch.profile import load_profile

FOUR_H200 = ("--gpu", "H200-SXM-141GB", "--nodes", "4", "--speed", "roofline", "--disaggregated")  # parser order
HOSTS = ("--hosts", "gpu-a,gpu-b,gpu-c,gpu-d")


def run_plan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def planned(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict]:
    code, out, _ = run_plan(capsys, *argv, "--json")
    assert code == 0
    return json.loads(out)["disaggregated"]


def pool_of(pool) -> tuple[int, int, bool, int]:
    return (pool.layout.tensor_parallel, pool.layout.data_parallel, pool.layout.expert_parallel, pool.workers)


def planned_pool(row: dict) -> tuple[int, int, bool, int]:
    return (row["tensor_parallel"], row["data_parallel"], row["expert_parallel"], row["workers"])


def test_the_best_plan_is_written_as_one_profile_that_loads_and_dry_runs(capsys, tmp_path: Path) -> None:
    best = planned(capsys, *FOUR_H200)[0]
    target = tmp_path / "pd.yaml"
    code, out, err = run_plan(capsys, *FOUR_H200, *HOSTS, "--profile-out", str(target))
    assert (code, err) == (0, "")
    text = target.read_text(encoding="utf-8")
    profile = load_profile(text, source=str(target))
    pools = profile.disaggregated
    assert pools is not None and profile.model == "deepseek-ai/DeepSeek-V3.2"
    assert (pool_of(pools.prefill), pool_of(pools.decode)) == (
        planned_pool(best["prefill"]),
        planned_pool(best["decode"]),
    )
    prefill_nodes = best["prefill"]["gpus"] // 8
    assert pools.prefill.hosts == ["gpu-a", "gpu-b", "gpu-c", "gpu-d"][:prefill_nodes]
    assert profile.name.startswith("deepseek-v3.2-pd-")
    lines = text.splitlines()
    assert (
        lines[0]
        == f"# meshdeck plan {shlex.join(FOUR_H200)} --profile-out {shlex.quote(str(target))} {shlex.join(HOSTS)}"
    )
    assert lines[1] == f"# prefill/decode plan 1: {best['label']} on {best['gpus']} GPUs"
    assert f"Profile: prefill/decode plan 1, {best['label']} → {target} ({profile.name} on gpu-a, " in out
    assert "one deployment: its router serves at gpu-a port 8000" in out
    assert not list(tmp_path.glob(".*"))  # written atomically: the temporary file was renamed away
    code = main(["--db", str(tmp_path / "never.db"), "launch", str(target), "--dry-run", "--json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0 and [n["argv"][0] for n in document["nodes"]][-1] == "vllm-router"
    assert not (tmp_path / "never.db").exists()


def test_disaggregated_rank_picks_that_plan_and_the_json_says_what_was_written(capsys, tmp_path: Path) -> None:
    third = planned(capsys, *FOUR_H200)[2]
    target = tmp_path / "third.yaml"
    argv = (*FOUR_H200, *HOSTS, "--profile-out", str(target), "--disaggregated-rank", "3", "--profile-name", "pd3")
    code, out, _ = run_plan(capsys, *argv, "--json")
    assert code == 0
    profile = load_profile(target.read_text(encoding="utf-8"))
    assert profile.name == "pd3" and profile.disaggregated is not None
    assert pool_of(profile.disaggregated.decode) == planned_pool(third["decode"])
    (written,) = json.loads(out)["profiles_written"]
    assert {k: written[k] for k in ("path", "name", "rank", "layout", "endpoint", "disaggregated")} == {
        "path": str(target), "name": "pd3", "rank": 3, "layout": third["label"], "endpoint": "gpu-a port 8000",
        "disaggregated": True,
    }  # fmt: skip
    header = target.read_text(encoding="utf-8").splitlines()[0]
    assert header.startswith(f"# meshdeck plan {shlex.join(FOUR_H200)} --json --profile-out")
    assert header.endswith("--profile-name pd3 --disaggregated-rank 3")  # the parser's order


def test_pools_whose_expert_parallel_crosses_nodes_are_written_with_their_wide_ep(capsys, tmp_path: Path) -> None:
    flags = ("--gpu", "H100-SXM5-80GB", "--nodes", "4", "--disaggregated", "--speed", "roofline")
    rank = next(i for i, row in enumerate(planned(capsys, *flags), 1) if row["prefill"]["nodes_per_worker"] > 1)
    target = tmp_path / "wide.yaml"
    code, _, err = run_plan(capsys, *flags, *HOSTS, "--profile-out", str(target), "--disaggregated-rank", str(rank))
    assert (code, err) == (0, "")
    profile = load_profile(target.read_text(encoding="utf-8"))
    assert profile.disaggregated is not None and profile.disaggregated.prefill.wide_ep is not None
    assert profile.disaggregated.prefill.wide_ep.all2all_backend == "deepep_high_throughput"
    code = main(["--db", str(tmp_path / "x.db"), "launch", str(target), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0 and "--all2all-backend deepep_high_throughput" in out and "--enable-dbo" in out


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        (("--rank", "2"), "--rank: picks an aggregated layout; with --disaggregated, --profile-out writes a "
         "prefill/decode plan: choose it with --disaggregated-rank"),
        (("--disaggregated-rank", "99"), "--disaggregated-rank: 99: the plan lists 12; choose 1 to 12"),
        (("--disaggregated-rank", "0"), "--disaggregated-rank: must be at least 1"),
    ],
)  # fmt: skip
def test_choosing_the_plan_is_checked_naming_the_option(capsys, tmp_path: Path, extra, error) -> None:
    target = tmp_path / "x.yaml"
    code, out, err = run_plan(capsys, *FOUR_H200, *HOSTS, "--profile-out", str(target), *extra)
    assert code == 2 and out == "" and not target.exists()
    assert err.startswith(f"meshdeck: error: {error}") and err.count("\n") == 1


def test_disaggregated_rank_needs_disaggregated_and_profile_out(capsys, tmp_path: Path) -> None:
    target = tmp_path / "x.yaml"
    aggregated = ("--gpu", "H200-SXM-141GB", "--hosts", "a", "--profile-out", str(target))
    code, _, err = run_plan(capsys, *aggregated, "--disaggregated-rank", "1")
    assert code == 2 and err.strip() == "meshdeck: error: --disaggregated-rank: only used with --disaggregated"
    code, _, err = run_plan(capsys, *FOUR_H200, "--disaggregated-rank", "1")
    assert code == 2 and err.strip() == "meshdeck: error: --disaggregated-rank: only used with --profile-out FILE"


def test_a_plan_whose_pools_share_a_node_is_refused_naming_the_pool(capsys, tmp_path: Path) -> None:
    flags = ("--gpu", "H200-SXM-141GB", "--weights-dtype", "int4", "--max-model-len", "8192", "--disaggregated")
    target = tmp_path / "x.yaml"
    code, _, err = run_plan(capsys, *flags, "--speed", "roofline", "--hosts", "solo", "--profile-out", str(target))
    assert code == 2 and not target.exists()
    assert err.startswith("meshdeck: error: --disaggregated-rank: 1 (") and "disaggregated.prefill: " in err
    assert "a profile gives each pool whole hosts of its own" in err


def test_a_cluster_with_no_prefill_decode_plan_has_nothing_to_write(capsys, tmp_path: Path) -> None:
    target = tmp_path / "x.yaml"
    code, _, err = run_plan(capsys, "--gpu", "H200-SXM-141GB", "--disaggregated", "--speed", "roofline",
                            "--hosts", "solo", "--profile-out", str(target))  # fmt: skip
    assert code == 2 and not target.exists()
    assert err.startswith("meshdeck: error: --disaggregated: no split of this cluster holds both")
