"""Nothing from a profile file can rewrite a terminal: control characters are refused in every profile
string (naming the field), and everything meshdeck prints from a plan or a stored profile is escaped."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from launch_builders import make_node, make_profile
from meshdeck.cli import main
from meshdeck.commands.launch import render_plan
from meshdeck.core.errors import InputError
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.profile import profile_from_mapping
from meshdeck.store import profiles as profile_store
from meshdeck.store.database import open_database

BASE = {"name": "t", "model": "m", "hosts": ["a"], "gpus_per_node": 1}
# ESC (a terminal escape), CR (rewrites the line), BEL, DEL, and C1's CSI (U+009B: ESC [ on some terminals)
CONTROLS = ["\x1b[2K", "\r", "\x07", "\x7f", "\x9b2J"]


def _refusal(**overrides: object) -> str:
    with pytest.raises(InputError) as excinfo:
        profile_from_mapping({**BASE, **overrides}, "evil.yaml")
    return str(excinfo.value)


@pytest.mark.parametrize("control", CONTROLS)
@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (lambda c: {"env": {"LD_PRELOAD": f"/tmp/x.so{c}"}}, "env.LD_PRELOAD"),
        (lambda c: {"env": {f"A{c}": "x"}}, "env"),
        (lambda c: {"vllm": {"extra_args": ["--ok", f"--x{c}"]}}, "vllm.extra_args[1]"),
        (lambda c: {"vllm": {"executable": f"vllm{c}"}}, "vllm.executable"),
        (lambda c: {"torch": {"args": [f"a{c}"]}}, "torch.args[0]"),
        (lambda c: {"torch": {"python": f"python3{c}"}}, "torch.python"),
        (lambda c: {"torch": {"script": f"/opt/x{c}.py"}}, "torch.script"),
        (lambda c: {"model": f"m{c}"}, "model"),
        (lambda c: {"name": f"t{c}"}, "name"),
        (lambda c: {"hosts": [f"a{c}"]}, "hosts[0]"),
    ],
)
def test_control_characters_are_refused_in_every_profile_string_naming_the_field(
    overrides: object, field: str, control: str
) -> None:
    message = _refusal(**overrides(control))  # type: ignore[operator]
    assert message.startswith(f"evil.yaml: {field}"), message
    assert message.isprintable(), repr(message)  # the refusal itself does not carry the character


def test_ordinary_unicode_and_spaces_in_env_values_are_kept() -> None:
    profile = profile_from_mapping({**BASE, "env": {"GREETING": "grüße — 你好", "SPACED": "a b"}})
    assert profile.env == {"GREETING": "grüße — 你好", "SPACED": "a b"}


def test_a_plan_with_control_characters_is_printed_escaped() -> None:
    """Whatever reaches a plan by another road (an agent's answer, an old record) is still shown escaped."""
    plan = build_launch_plan(make_profile(), [make_node("gpu-a", "10.0.0.1")], run_id="r")
    (command,) = plan.commands
    hostile = dataclasses.replace(command, env=(*command.env, ("X", "a\x1b[2Jb\rc\u202ed")), host="gpu\x1b]0;x\x07")
    text = render_plan(dataclasses.replace(plan, commands=(hostile,), warnings=("w\x1b[1A",)), ["note\r"])
    assert all(line.isprintable() for line in text.split("\n")), repr(text)
    assert "a\\x1b[2Jb\\rc\\u202ed" in text and "gpu\\x1b]0;x\\x07" in text


def test_an_error_naming_a_hostile_file_name_is_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", str(tmp_path / "\x1b[2Jgone.yaml"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.endswith("\n") and err[:-1].isprintable(), repr(err)
    assert "\\x1b[2Jgone.yaml" in err


def test_profiles_list_and_show_escape_what_an_older_database_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row stored before profiles were checked this strictly is still printed safely."""
    db_path = tmp_path / "m.db"
    text = "name: old\nmodel: m\x1b[2J\nhosts: [a]\ngpus_per_node: 1\nenv: {LD_PRELOAD: '/x.so\r'}\n"
    data = {"name": "old", "model": "m\x1b[2J", "engine": "vllm\x1b[1A", "hosts": ["a\x1b[2J"], "layout": {}}
    with open_database(db_path) as db:
        profile_store.create_profile(db, "old", text, data)
    for args in (["profiles", "list"], ["profiles", "show", "old"]):
        assert main(["--db", str(db_path), *args]) == 0
        out = capsys.readouterr().out
        assert all(line.isprintable() for line in out.split("\n")), repr(out)
    assert main(["--db", str(db_path), "profiles", "show", "old"]) == 0
    assert "model: m\\x1b[2J" in capsys.readouterr().out
