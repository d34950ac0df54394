"""`meshdeck plan --profile-out`: the chosen layout becomes launchable profile YAML, as the console saves it."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from meshdeck.cli import main
from meshdeck.core.errors import InputError
from meshdeck.core.planner import plan
from meshdeck.launch.profile import load_profile
from meshdeck.services.plan_profiles import default_profile_name, instance_paths, profile_mappings

H200 = ("--gpu", "H200-SXM-141GB")


def run_plan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def ranked(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict]:
    code, out, _ = run_plan(capsys, *argv, "--json", "--all")
    assert code == 0
    return json.loads(out)["layouts"]


def layout_of(profile_layout) -> tuple[int, int, int, bool]:
    return (
        profile_layout.tensor_parallel,
        profile_layout.pipeline_parallel,
        profile_layout.data_parallel,
        profile_layout.expert_parallel,
    )


def layout_key(row: dict) -> tuple[int, int, int, bool]:
    return (row["tensor_parallel"], row["pipeline_parallel"], row["data_parallel"], row["expert_parallel"])


def test_the_best_layout_is_written_as_a_valid_profile_of_the_named_hosts(capsys, tmp_path: Path) -> None:
    best = ranked(capsys, *H200)[0]
    target = tmp_path / "ds32.yaml"
    code, out, err = run_plan(capsys, *H200, "--hosts", "gpu-a", "--profile-out", str(target))
    assert (code, err) == (0, "")
    text = target.read_text(encoding="utf-8")
    profile = load_profile(text, source=str(target))
    assert layout_of(profile.layout) == layout_key(best)
    assert profile.hosts == ["gpu-a"] and profile.gpus_per_node == 8
    assert profile.model == "deepseek-ai/DeepSeek-V3.2"  # the bundled card's Hugging Face id
    name = f"deepseek-v3.2-{'-'.join(best_label_parts(best))}"
    label = "·".join(part.upper() for part in best_label_parts(best))
    assert profile.name == name
    assert (profile.vllm.max_model_len, profile.vllm.gpu_memory_utilization) == (163840, 0.9)
    header = text.splitlines()[0]
    assert header == f"# meshdeck plan --gpu H200-SXM-141GB --profile-out {shlex.quote(str(target))} --hosts gpu-a"
    assert f"Profile: rank 1, {label} → {target} ({name} on gpu-a)" in out
    assert not list(tmp_path.glob(".*"))  # the temporary file was renamed away


def best_label_parts(row: dict) -> list[str]:
    parts = [f"tp{row['tensor_parallel']}"]
    if row["pipeline_parallel"] > 1:
        parts.append(f"pp{row['pipeline_parallel']}")
    if row["data_parallel"] > 1:
        parts.append(f"dp{row['data_parallel']}")
    return [*parts, "ep"] if row["expert_parallel"] else parts


def test_rank_picks_that_row_of_the_ranking_and_the_settings_follow_the_flags(capsys, tmp_path: Path) -> None:
    flags = (*H200, "--max-model-len", "32768", "--kv-cache-dtype", "fp8", "--gpu-memory-utilization", "0.85")
    third = ranked(capsys, *flags)[2]
    target = tmp_path / "third.yaml"
    argv = (*flags, "--hosts", "h1", "--profile-out", str(target), "--rank", "3", "--profile-name", "mine")
    code, _, err = run_plan(capsys, *argv, "--model-id", "/models/DeepSeek-V3.2")
    assert (code, err) == (0, "")
    profile = load_profile(target.read_text(encoding="utf-8"))
    assert layout_of(profile.layout) == layout_key(third)
    assert (profile.name, profile.model) == ("mine", "/models/DeepSeek-V3.2")
    assert (profile.vllm.max_model_len, profile.vllm.kv_cache_dtype) == (32768, "fp8")
    assert profile.vllm.gpu_memory_utilization == pytest.approx(0.85)


def test_a_rank_beyond_the_list_is_refused_naming_rank(capsys, tmp_path: Path) -> None:
    count = len(ranked(capsys, *H200))
    target = tmp_path / "x.yaml"
    code, out, err = run_plan(capsys, *H200, "--hosts", "a", "--profile-out", str(target), "--rank", str(count + 1))
    assert code == 2 and out == ""
    assert err.startswith(f"meshdeck: error: --rank: {count + 1}: the plan ranks {count} layout(s)")
    assert err.count("\n") == 1 and not target.exists()
    code, _, err = run_plan(capsys, *H200, "--hosts", "a", "--profile-out", str(target), "--rank", "0")
    assert code == 2 and err.startswith("meshdeck: error: --rank: must be at least 1")


def test_a_layout_that_does_not_fit_is_refused_with_its_shortfall(capsys, tmp_path: Path) -> None:
    rows = ranked(capsys, *H200)
    rank = next(i for i, row in enumerate(rows, 1) if not row["fits"])
    fitting = sum(row["fits"] for row in rows)
    target = tmp_path / "x.yaml"
    code, _, err = run_plan(capsys, *H200, "--hosts", "a", "--profile-out", str(target), "--rank", str(rank))
    assert code == 2 and not target.exists()
    assert err.startswith(f"meshdeck: error: --rank: {rank} (")
    assert "does not fit: short by" in err and f"choose --rank 1 to {fitting}" in err


def test_nothing_fits_then_rank_1_is_refused_too(capsys, tmp_path: Path) -> None:
    code, _, err = run_plan(capsys, "--gpu", "80GB", "--hosts", "a", "--profile-out", str(tmp_path / "x.yaml"))
    assert code == 2
    assert err.startswith("meshdeck: error: --rank: 1 (") and "nothing fits" in err


def test_instances_sharing_a_node_cannot_be_profiles(capsys, tmp_path: Path) -> None:
    flags = (*H200, "--weights-dtype", "int4", "--max-model-len", "8192", "--tensor-parallel", "4")
    rows = ranked(capsys, *flags)
    rank = next(i for i, r in enumerate(rows, 1) if r["fits"] and r["instances"] > 1 and r["gpus_per_instance"] < 8)
    code, _, err = run_plan(
        capsys, *flags, "--hosts", "a", "--profile-out", str(tmp_path / "x.yaml"), "--rank", str(rank)
    )
    assert code == 2
    assert err.startswith(f"meshdeck: error: --rank: {rank} (2× TP4") and "instances per node" in err


@pytest.mark.parametrize(
    ("hosts", "problem"),
    [
        ("gpu-a", "names 1 host(s) but --nodes is 2"),
        ("gpu-a,gpu-b,gpu-c", "names 3 host(s) but --nodes is 2"),
        ("gpu-a,gpu-a", "listed twice"),
        ("gpu-a,gpu b", "'gpu b' is not a host name"),
        ("gpu-a,", "'' is not a host name"),
    ],
)
def test_hosts_must_name_each_node_once(capsys, tmp_path: Path, hosts: str, problem: str) -> None:
    target = tmp_path / "x.yaml"
    code, _, err = run_plan(capsys, *H200, "--nodes", "2", "--hosts", hosts, "--profile-out", str(target))
    assert code == 2 and not target.exists()
    assert err.startswith("meshdeck: error: --hosts: ") and problem in err and err.count("\n") == 1


def test_profile_out_needs_hosts_and_the_profile_flags_need_profile_out(capsys, tmp_path: Path) -> None:
    code, _, err = run_plan(capsys, *H200, "--profile-out", str(tmp_path / "x.yaml"))
    assert code == 2 and err.startswith("meshdeck: error: --hosts: required with --profile-out")
    only_with_profile_out = (
        ("--hosts", "a"),
        ("--rank", "2"),
        ("--profile-name", "n"),
        ("--model-id", "m"),
        ("--script", "s"),
        ("--script-args", "x"),
    )
    for flag, value in only_with_profile_out:
        code, _, err = run_plan(capsys, *H200, flag, value)
        assert code == 2 and err.strip() == f"meshdeck: error: {flag}: only used with --profile-out FILE"


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (("--profile-name", "-bad name"), "--profile-name"),
        (("--model-id=--served-model-name=x",), "--model-id"),
        (("--model-id", "a\nb"), "--model-id"),
        (("--mode", "train", "--engine", "torch", "--script", "/opt/train.py"), "--profile-out"),
        (("--engine", "torch"), "--script"),
        (("--engine", "torch", "--script", "  "), "--script"),
        (("--engine", "torch", "--script=-x"), "--script"),
        (("--engine", "torch", "--script", "run.py", "--script-args", "--name 'a b"), "--script-args"),
        (("--engine", "torch", "--script", "run.py", "--script-args", "a\x01b"), "--script-args"),
        (("--script", "run.py"), "--script"),
        (("--script-args", "--steps 5"), "--script-args"),
    ],
)
def test_bad_profile_values_name_the_flag(capsys, tmp_path: Path, extra: tuple[str, ...], field: str) -> None:
    target = tmp_path / "x.yaml"
    code, _, err = run_plan(capsys, *H200, "--hosts", "a", "--profile-out", str(target), *extra)
    assert code == 2 and not target.exists()
    assert err.startswith(f"meshdeck: error: {field}: ") and err.count("\n") == 1


def test_a_missing_folder_is_refused_before_planning(capsys, tmp_path: Path) -> None:
    code, _, err = run_plan(capsys, *H200, "--hosts", "a", "--profile-out", str(tmp_path / "no" / "x.yaml"))
    assert code == 2 and err.startswith("meshdeck: error: --profile-out: folder ")


def test_several_instances_are_written_as_numbered_files_one_per_node(capsys, tmp_path: Path) -> None:
    flags = (*H200, "--nodes", "2", "--tensor-parallel", "1", "--data-parallel", "8", "--expert-parallel", "on")
    assert ranked(capsys, *flags)[0]["instances"] == 2
    target = tmp_path / "pair.yaml"
    code, out, _ = run_plan(capsys, *flags, "--hosts", "gpu-a,gpu-b", "--profile-out", str(target), "--json")
    assert code == 0
    document = json.loads(out)  # still one JSON object
    first, second = tmp_path / "pair-1.yaml", tmp_path / "pair-2.yaml"
    assert sorted(tmp_path.iterdir()) == [first, second] == instance_paths(target, 2)
    profiles = [load_profile(path.read_text(encoding="utf-8")) for path in (first, second)]
    assert [(p.name, p.hosts) for p in profiles] == [
        ("deepseek-v3.2-2x-tp1-dp8-ep-1", ["gpu-a"]),
        ("deepseek-v3.2-2x-tp1-dp8-ep-2", ["gpu-b"]),
    ]
    assert all(layout_of(p.layout) == (1, 1, 8, True) and p.gpus_per_node == 8 for p in profiles)
    written = [
        {k: w[k] for k in ("path", "name", "hosts", "rank", "layout", "endpoint")} for w in document["profiles_written"]
    ]
    assert written == [
        {"path": str(first), "name": profiles[0].name, "hosts": ["gpu-a"], "rank": 1, "layout": "2× TP1·DP8·EP",
         "endpoint": "gpu-a port 8000"},
        {"path": str(second), "name": profiles[1].name, "hosts": ["gpu-b"], "rank": 1, "layout": "2× TP1·DP8·EP",
         "endpoint": "gpu-b port 8000"},
    ]  # fmt: skip
    assert layout_key(document["layouts"][0]) == (1, 1, 8, True)


def test_json_output_without_profile_out_has_no_profiles_key(capsys) -> None:
    code, out, _ = run_plan(capsys, *H200, "--json", "--top", "1")
    assert code == 0 and "profiles_written" not in json.loads(out)


def test_a_multi_node_instance_lists_its_hosts_head_first(capsys, tmp_path: Path) -> None:
    flags = (*H200, "--nodes", "2", "--tensor-parallel", "8", "--pipeline-parallel", "2", "--expert-parallel", "off")
    target = tmp_path / "tp8pp2.yaml"
    code, _, _ = run_plan(capsys, *flags, "--hosts", "head,worker", "--profile-out", str(target))
    assert code == 0
    profile = load_profile(target.read_text(encoding="utf-8"))
    assert profile.hosts == ["head", "worker"] and layout_of(profile.layout) == (8, 2, 1, False)


def test_default_profile_name_folds_the_label_into_one_valid_name(request_for, v32) -> None:
    result = plan(request_for(v32, nodes=2))
    packed = next(layout for layout in result.layouts if layout.instances > 1)
    name = default_profile_name(result, packed)
    assert name.startswith(f"deepseek-v3.2-{packed.instances}x-tp")  # "2× TP1·DP8" -> "2x-tp1-dp8"
    assert "--" not in name and name == name.lower()


def test_the_header_command_rewrites_the_file_byte_for_byte_even_with_spaces(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    argv = (*H200, "--max-model-len", "65536", "--hosts", "gpu-a", "--profile-out", "out.yaml")
    code, _, _ = run_plan(capsys, *argv, "--model-id", "/models/deep seek $(v3.2)", "--rank", "2")
    assert code == 0
    first = Path("out.yaml").read_bytes()
    header = first.decode().splitlines()[0]
    assert header.startswith("# meshdeck plan --gpu H200-SXM-141GB --max-model-len 65536 --profile-out out.yaml")
    Path("out.yaml").unlink()
    assert main(shlex.split(header[2:])[1:]) == 0
    assert Path("out.yaml").read_bytes() == first
    assert load_profile(first).model == "/models/deep seek $(v3.2)"


def test_a_torch_layout_names_the_script_its_ranks_run_with_its_arguments(capsys, tmp_path: Path) -> None:
    flags = (*H200, "--nodes", "2", "--engine", "torch", "--tensor-parallel", "8", "--pipeline-parallel", "2")
    flags = (*flags, "--expert-parallel", "off")
    target = tmp_path / "train.yaml"
    argv = (*flags, "--hosts", "gpu-a,gpu-b", "--profile-out", str(target), "--script", "/opt/jobs/train ds.py")
    code, _, err = run_plan(capsys, *argv, "--script-args", "--config '/data/my cfg.yaml' --steps 100")
    assert (code, err) == (0, "")
    text = target.read_text(encoding="utf-8")
    profile = load_profile(text)
    assert profile.engine == "torch" and profile.model == "deepseek-ai/DeepSeek-V3.2"
    assert profile.torch.script == "/opt/jobs/train ds.py"  # the operator's script, not the tiny test model
    assert profile.torch.args == ["--config", "/data/my cfg.yaml", "--steps", "100"]
    assert layout_of(profile.layout) == (8, 2, 1, False) and profile.hosts == ["gpu-a", "gpu-b"]
    dry_run = tmp_path / "never.db"
    assert main(["--db", str(dry_run), "launch", str(target), "--dry-run", "--json"]) == 0
    nodes = json.loads(capsys.readouterr().out)["nodes"]
    assert all(node["argv"][-5:] == ["/opt/jobs/train ds.py", *profile.torch.args] for node in nodes)
    header = text.splitlines()[0]
    target.unlink()
    assert main(shlex.split(header[2:])[1:]) == 0  # the header still rewrites it byte for byte
    assert target.read_text(encoding="utf-8") == text


def test_a_torch_layout_without_a_script_names_the_built_in_workloads(capsys, tmp_path: Path) -> None:
    target = tmp_path / "x.yaml"
    code, out, err = run_plan(capsys, *H200, "--engine", "torch", "--hosts", "a", "--profile-out", str(target))
    assert (code, out) == (2, "") and not target.exists()
    assert err.strip() == (
        "meshdeck: error: --script: a torch layout needs the script each rank runs: a path on the servers, "
        "or collectives / tiny-deepseek (built-in test workloads)"
    )


def test_a_vllm_layout_refuses_a_script_in_the_mapping_too(request_for, v32) -> None:
    result = plan(request_for(v32))
    layout = result.fitting[0]
    with pytest.raises(InputError) as refused:
        profile_mappings(layout, result, ["a"], "n", "m", script="run.py")
    assert refused.value.field == "script"
    assert "torch" in refused.value.problem


def test_the_profile_takes_the_plans_own_mitigation_for_v32s_flashmla_batch_limit(capsys, tmp_path: Path) -> None:
    """The plan warns that vLLM's default max_num_seqs (1024) can crash V3.2's FlashMLA mla_combine and says to pass
    --max-num-seqs 256: the profile it writes passes it, and the file and the output say why."""
    assert "mla_combine_large_batch" in ranked(capsys, *H200)[0]["warning_codes"]
    target = tmp_path / "ds32.yaml"
    code, out, err = run_plan(capsys, *H200, "--hosts", "gpu-a", "--profile-out", str(target))
    assert (code, err) == (0, "")
    text = target.read_text(encoding="utf-8")
    assert load_profile(text).vllm.max_num_seqs == 256
    said = "max_num_seqs 256 instead of vLLM's default 1024: V3.2 batches above 256 can fail in FlashMLA's mla_combine"
    assert text.splitlines()[2].startswith(f"# {said}") and f"applied: {said}" in out


def test_a_max_num_seqs_the_operator_chose_is_kept(capsys, tmp_path: Path) -> None:
    target = tmp_path / "ds32.yaml"
    code, out, _ = run_plan(capsys, *H200, "--max-num-seqs", "512", "--hosts", "gpu-a", "--profile-out", str(target))
    assert code == 0 and load_profile(target.read_text(encoding="utf-8")).vllm.max_num_seqs == 512
    assert "applied:" not in out


def test_a_layout_of_several_instances_says_it_makes_one_endpoint_each_and_names_the_one_instance_layout(
    capsys, tmp_path: Path
) -> None:
    flags = (*H200, "--nodes", "2")
    layouts = ranked(capsys, *flags)
    assert layouts[0]["instances"] == 2
    rank, single = next(
        (i, row)
        for i, row in enumerate(layouts, start=1)
        if row["instances"] == 1 and row["gpus"] == 16 and row["fits"] and row["valid"] and row["supported"]
    )
    label = "·".join(part.upper() for part in best_label_parts(single))
    code, out, _ = run_plan(capsys, *flags, "--hosts", "gpu-a,gpu-b", "--profile-out", str(tmp_path / "p.yaml"))
    assert code == 0
    assert "saving it makes 2 profiles (-1, -2), launched as 2 deployments with 2 endpoints" in out
    assert "meshdeck starts no router or load balancer" in out
    assert f"save rank {rank}, {label}, which spans the same 16 GPUs as one deployment" in out


def test_the_text_table_explains_n_times_when_it_shows_such_a_layout(capsys) -> None:
    _, out, _ = run_plan(capsys, *H200, "--nodes", "2", "--top", "3")
    assert "2× TP1·DP8" in out
    assert "N×: N independent instances of the layout, one `vllm serve` (or torchrun) each on its own GPUs" in out
    _, out, _ = run_plan(capsys, *H200, "--nodes", "2", "--data-parallel", "16", "--top", "3")
    assert "N×:" not in out  # no such layout shown, no legend for it
