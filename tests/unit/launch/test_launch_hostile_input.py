"""Hostile profiles: nothing is executed, everything arrives verbatim in argv/env, or is refused clearly."""

from __future__ import annotations

import shlex

import pytest
from launch_builders import make_node, make_profile
from meshdeck.core.errors import InputError
from meshdeck.launch.build import build_launch_plan
from meshdeck.launch.profile import load_profile

HOSTILE_MODEL = "x; touch /tmp/pwned"
HOSTILE_ENV = {
    "QUOTES": 'it\'s "quoted"',
    "SPACES": "a b  c",
    "SUBSHELL": "$(touch /tmp/pwned)",
    "BACKTICKS": "`touch /tmp/pwned`",
    "GLOB": "*",
}


def test_a_model_name_with_shell_syntax_is_one_argv_element() -> None:
    profile = make_profile(model=HOSTILE_MODEL, env=HOSTILE_ENV)
    (command,) = build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1")], run_id="r1").commands
    assert command.argv[:3] == ("vllm", "serve", HOSTILE_MODEL)
    for key, value in HOSTILE_ENV.items():
        assert command.env_dict[key] == value


def test_the_displayed_command_is_shell_quoted_and_splits_back_exactly() -> None:
    profile = make_profile(model=HOSTILE_MODEL, env=HOSTILE_ENV)
    (command,) = build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1")], run_id="r1").commands
    line = command.display()
    assert "'x; touch /tmp/pwned'" in line
    words = shlex.split(line)
    assert words[0] == "env"
    count = len(command.env)
    assert [w.split("=", 1) for w in words[1 : 1 + count]] == [[k, v] for k, v in command.env]
    assert tuple(words[1 + count :]) == command.argv


def test_torch_script_arguments_stay_verbatim() -> None:
    profile = make_profile(
        engine="torch",
        hosts=["gpu-a"],
        gpus_per_node=2,
        layout={"tensor_parallel": 2},
        torch={"script": "/opt/jobs/train.py", "args": ["--name", "$(reboot)", "a;b"]},
    )
    (command,) = build_launch_plan(profile, [make_node("gpu-a", "10.0.0.1")], run_id="r1").commands
    assert command.argv[-4:] == ("/opt/jobs/train.py", "--name", "$(reboot)", "a;b")


@pytest.mark.parametrize(
    ("yaml_text", "field"),
    [
        ('name: t\nmodel: m\nhosts: ["gpu-a\\nrm -rf /"]\ngpus_per_node: 1\n', "hosts[0]"),
        ('name: t\nmodel: "m\\nx"\nhosts: [a]\ngpus_per_node: 1\n', "model"),
        ('name: t\nmodel: "--trust-remote-code"\nhosts: [a]\ngpus_per_node: 1\n', "model"),
        ("name: t\nmodel: m\nhosts: [a]\ngpus_per_node: 1\nenv: {'A B': x}\n", "env"),
        ('name: t\nmodel: m\nhosts: [a]\ngpus_per_node: 1\nvllm: {extra_args: ["--x\\n--y"]}\n', "vllm.extra_args"),
        ('name: t\nmodel: m\nhosts: [a]\ngpus_per_node: 1\nvllm: {executable: "-c"}\n', "vllm.executable"),
        ('name: t\nmodel: m\nhosts: [a]\ngpus_per_node: 1\ntorch: {python: ""}\n', "torch.python"),
        ('name: t\nmodel: m\nhosts: [a]\ngpus_per_node: 1\ntorch: {script: "-m"}\n', "torch.script"),
    ],
)
def test_hostile_profile_fields_are_refused_naming_the_field(yaml_text: str, field: str) -> None:
    with pytest.raises(InputError) as excinfo:
        load_profile(yaml_text, source="evil.yaml")
    message = str(excinfo.value)
    assert message.startswith(f"evil.yaml: {field}"), message
    assert "\n" not in message


@pytest.mark.parametrize(
    "yaml_text",
    [
        "[" * 5000 + "]" * 5000,  # flow sequences: once a RecursionError out of the YAML composer
        "name: t\nvllm: " + "{a: " * 3000 + "1" + "}" * 3000,
        "\n".join(" " * i + f"k{i}:" for i in range(400)) + " 1",  # block mappings, each one deeper
    ],
)
def test_deeply_nested_yaml_is_refused_naming_the_file(yaml_text: str) -> None:
    with pytest.raises(InputError) as excinfo:
        load_profile(yaml_text, source="deep.yaml")
    message = str(excinfo.value)
    assert message.startswith("deep.yaml: nested deeper than 16 levels at line "), message
    assert "\n" not in message


def test_nesting_up_to_the_limit_is_still_read_and_then_validated_by_field() -> None:
    deep_extra_arg = "[" * 13 + '"x"' + "]" * 13  # 16 levels with the mapping, vllm and extra_args around it
    with pytest.raises(InputError) as excinfo:
        load_profile(
            f"name: t\nmodel: m\nhosts: [a]\ngpus_per_node: 1\nvllm: {{extra_args: {deep_extra_arg}}}\n", "ok.yaml"
        )
    assert str(excinfo.value).startswith("ok.yaml: vllm.extra_args[0]")  # a type error, not a depth error


@pytest.mark.parametrize("number", ["9" * 200_000, "0x" + "f" * 5_000], ids=["decimal-200k-digits", "hex-5k-digits"])
def test_a_number_too_long_for_python_is_refused_naming_its_line_not_a_traceback(number: str) -> None:
    text = f"name: t\nmodel: m\nhosts: [a]\ngpus_per_node: 1\nenv:\n  FOO: {number}\n"
    with pytest.raises(InputError) as excinfo:
        load_profile(text, "big.yaml")
    message = str(excinfo.value)
    assert (
        message
        == f"big.yaml: a number {len(number)} characters long at line 6, column 8; put it in quotes if it is text"
    )
