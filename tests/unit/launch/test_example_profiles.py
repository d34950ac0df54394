"""examples/profiles/ never rots: every example loads, dry-runs to the commands of its layout, and every
example `meshdeck plan --profile-out` wrote is written again byte for byte by the command in its header."""

from __future__ import annotations

import json
import shlex
from collections import defaultdict
from pathlib import Path

import pytest
from meshdeck.cli import main
from meshdeck.launch.profile import load_profile

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "profiles"
FILES = sorted(EXAMPLES.glob("*.yaml"))
PLAN_HEADER = "# meshdeck plan "


def _header(path: Path) -> str:
    return path.read_text(encoding="utf-8").splitlines()[0]


def test_the_documented_examples_are_there_and_each_file_is_in_the_readme() -> None:
    names = {path.name for path in FILES}
    assert {
        "ds32-h200-1node.yaml",
        "ds32-h200-2nodes-1.yaml",
        "ds32-h200-2nodes-2.yaml",
        "ds32-h200-2nodes-dp16-ep.yaml",
        "ds3-h100-2nodes-tp8-pp2.yaml",
        "tiny-deepseek-2nodes.yaml",
    } <= names
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    assert [path.name for path in FILES if f"`{path.name}`" not in readme] == []


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_example_loads_and_dry_runs_to_its_layout(path: Path, tmp_path: Path, capsys) -> None:
    header = _header(path)
    assert header.startswith((PLAN_HEADER, "# written by hand")), "say where the example came from"
    profile = load_profile(path.read_text(encoding="utf-8"), source=str(path))
    assert profile.name == path.stem
    db = tmp_path / "never-created.db"
    assert main(["--db", str(db), "launch", str(path), "--dry-run", "--json"]) == 0
    nodes = json.loads(capsys.readouterr().out)["nodes"]
    if profile.disaggregated is not None:  # each pool's engines, then the router on the first prefill host
        assert nodes[-1]["name"] == "router" and nodes[-1]["host"] == profile.hosts[0]
        assert [node["host"] for node in nodes[:-1]] == profile.hosts
        for node in nodes[:-1]:
            pool = profile.disaggregated.prefill if node["name"].startswith("prefill") else profile.disaggregated.decode
            argv = node["argv"]
            assert argv[:3] == ["vllm", "serve", profile.model]
            assert argv[argv.index("--data-parallel-size") + 1] == str(pool.layout.data_parallel)
            assert ("--enable-expert-parallel" in argv) == pool.layout.expert_parallel
        assert not db.exists()
        return
    assert [node["host"] for node in nodes] == profile.hosts
    layout = profile.layout
    for node in nodes:
        argv = node["argv"]
        if profile.engine == "vllm":
            assert argv[:3] == ["vllm", "serve", profile.model]
            assert argv[argv.index("--tensor-parallel-size") + 1] == str(layout.tensor_parallel)
            if layout.pipeline_parallel > 1:
                assert argv[argv.index("--pipeline-parallel-size") + 1] == str(layout.pipeline_parallel)
            if layout.data_parallel > 1:
                assert argv[argv.index("--data-parallel-size") + 1] == str(layout.data_parallel)
            assert ("--enable-expert-parallel" in argv) == layout.expert_parallel
            assert argv[argv.index("--max-model-len") + 1] == str(profile.vllm.max_model_len)
        else:
            assert argv[argv.index("--nproc-per-node") + 1] == str(profile.gpus_per_node)
            assert argv[argv.index("--nnodes") + 1] == str(len(profile.hosts))
            assert node["env"]["MESHDECK_TENSOR_PARALLEL"] == str(layout.tensor_parallel)
            assert node["env"]["MESHDECK_PIPELINE_PARALLEL"] == str(layout.pipeline_parallel)
    assert not db.exists()


def _planned_examples() -> dict[str, list[Path]]:
    by_command: dict[str, list[Path]] = defaultdict(list)
    for path in FILES:
        header = _header(path)
        if header.startswith(PLAN_HEADER):
            by_command[header[2:]].append(path)
    return dict(by_command)


@pytest.mark.parametrize("command", sorted(_planned_examples()), ids=lambda c: c.split("--profile-out ")[-1][:60])
def test_the_header_command_writes_the_example_again_byte_for_byte(command: str, tmp_path: Path, monkeypatch) -> None:
    argv = shlex.split(command)
    assert argv[:2] == ["meshdeck", "plan"]
    out = Path(argv[argv.index("--profile-out") + 1])
    assert not out.is_absolute() and out.parent == Path("examples/profiles")
    (tmp_path / out.parent).mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert main(argv[1:]) == 0
    written = sorted((tmp_path / out.parent).iterdir())
    committed = _planned_examples()[command]
    assert [p.name for p in written] == [p.name for p in committed]
    for new, old in zip(written, committed, strict=True):
        assert new.read_bytes() == old.read_bytes(), (
            f"{old.name} is stale: the planner now writes something else; run `{command}` from the repository root"
        )


@pytest.mark.parametrize(
    "path",
    [p for p in FILES if _header(p).startswith(PLAN_HEADER) and "--disaggregated" not in _header(p)],
    ids=lambda p: p.name,
)
def test_a_profile_names_its_layout_as_the_plan_that_wrote_it_did(path: Path) -> None:
    """One notation everywhere ("TP1·DP16·EP"): the label a profile shows (profiles list, the console's profiles
    view) is the planner's, as the header's second line quotes it (less the "N×" of several instances)."""
    planned = path.read_text(encoding="utf-8").splitlines()[1].removeprefix("# rank 1 of the plan: ").split(" on ")[0]
    assert load_profile(path.read_text(encoding="utf-8")).layout.label() == planned.split("× ")[-1]
