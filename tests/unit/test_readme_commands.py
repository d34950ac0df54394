"""README's commands are real: every `meshdeck …` line of its shell blocks parses with the CLI's own parser, and
the walkthrough "From servers to serving DeepSeek" runs from `hosts add` to `launch --dry-run` as written (the
servers stood in for by a probe that answers like one; what needs them — launch, curl, logs, stop — is parsed)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from meshdeck.cli import build_parser, hoist_global_options, main
from meshdeck.launch.profile import load_profile
from meshdeck.remote.hostkeys import HostKeyInfo
from meshdeck.services import hosts as host_service
from meshdeck.services.hosts import ProbeReport
from meshdeck_agent.wire_inventory import Inventory

README = Path(__file__).resolve().parents[2] / "README.md"
WALKTHROUGH = "## From servers to serving DeepSeek"


def shell_lines(text: str) -> list[str]:
    """The lines of every ```sh block, a trailing backslash joining a line to the next."""
    lines: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M):
        lines += [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    return lines


def meshdeck_argv(line: str) -> list[str]:
    return shlex.split(line, comments=True)[1:]


README_COMMANDS = [line for line in shell_lines(README.read_text(encoding="utf-8")) if line.startswith("meshdeck")]


def test_the_readme_has_its_walkthrough_and_many_commands() -> None:
    assert WALKTHROUGH in README.read_text(encoding="utf-8") and len(README_COMMANDS) > 30


@pytest.mark.parametrize("line", README_COMMANDS)
def test_every_readme_command_parses(line: str, capsys) -> None:
    argv = meshdeck_argv(line)
    try:
        args, extras = build_parser().parse_known_args(hoist_global_options(argv))
    except SystemExit:
        pytest.fail(f"{line}\n{capsys.readouterr().err}")
    assert extras == [], f"{line}: not taken: {extras}"
    assert getattr(args, "func", None) is not None or all(a.startswith("--") for a in argv), line


def _walkthrough() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index(WALKTHROUGH) :].split("\n## ", 1)[0]
    return shell_lines(section)


class FakeServers:
    """Servers as `hosts add/probe` meet them: an unknown host key must be accepted the first time (saved after
    that, so a later probe is not asked), then the report."""

    def __init__(self) -> None:
        self.known: set[str] = set()

    def probe(self, target: str, **kwargs: Any) -> ProbeReport:
        if target not in self.known:
            assert kwargs["host_key_prompt"](HostKeyInfo(target, "ssh-ed25519", "SHA256:abc", "AAAA")) is True
            self.known.add(target)
        return ProbeReport(
            target=target, route=f"{target}:22", host_key="ssh-ed25519 SHA256:abc", auth="publickey",
            python="/usr/bin/python3", python_version="3.11.4", machine="x86_64", agent_path="/a.pyz",
            uploaded=True, agent_version="0.2.0", protocol=1, seconds=1.0,
            inventory=Inventory.from_wire({"hostname": target, "gpus": [], "nics": []}),
        )  # fmt: skip


def test_the_walkthrough_runs_as_written_up_to_the_dry_run(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    servers = FakeServers()
    monkeypatch.setattr(host_service, "probe", servers.probe)
    lines = _walkthrough()
    assert [line.split()[0] for line in lines] == ["meshdeck"] * 8 + ["curl", "curl"] + ["meshdeck"] * 4
    offline = lines[: next(i for i, line in enumerate(lines) if "--dry-run" in meshdeck_argv(line)) + 1]
    out = ""
    for line in offline:
        code = main(["--db", str(tmp_path / "meshdeck.db"), *meshdeck_argv(line)])
        captured = capsys.readouterr()
        assert code == 0, f"{line}\n{captured.err}"
        out = captured.out
    assert servers.known == {"ubuntu@10.0.0.5", "ubuntu@10.0.0.6"}
    profile = load_profile((tmp_path / "ds32.yaml").read_text(encoding="utf-8"))
    assert (profile.model, profile.hosts, profile.vllm.max_num_seqs) == (
        "/models/DeepSeek-V3.2",
        ["gpu-a", "gpu-b"],
        256,
    )
    assert out.startswith("ds32: vllm, dp-multi-node, head gpu-a (10.0.0.5)")  # the dry run: one deployment
    assert f"ports on the head: {profile.vllm.port} (vLLM API)" in out
    curl = next(line for line in lines if line.startswith("curl"))
    assert f"http://10.0.0.5:{profile.vllm.port}/v1/" in curl  # the endpoint the launch will print
    assert profile.model in lines[lines.index(curl) + 1]  # the model name vLLM serves it under
