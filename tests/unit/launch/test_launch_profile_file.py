"""Reading a profile file: a key given twice is refused (YAML would keep the last one silently), and a
file is read only up to the size limit, so a device or an endless pipe cannot exhaust memory."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from meshdeck.cli import main
from meshdeck.core.errors import InputError
from meshdeck.launch.profile import MAX_PROFILE_BYTES, load_profile

PROFILE = """\
name: t
model: m
hosts: [a]
gpus_per_node: 1
vllm:
  port: 8000
env:
  NCCL_SOCKET_IFNAME: eth0
"""


@pytest.mark.parametrize(
    ("text", "key", "line", "first"),
    [
        (PROFILE + "model: other\n", "model", 9, 2),
        (PROFILE.replace("  port: 8000\n", "  port: 8000\n  port: 9000\n"), "port", 7, 6),
        (PROFILE + "  NCCL_SOCKET_IFNAME: ib0\n", "NCCL_SOCKET_IFNAME", 9, 8),
        ("name: t\nname: t\nmodel: m\nhosts: [a]\ngpus_per_node: 1\n", "name", 2, 1),
        (
            "name: t\nmodel: m\nhosts: [a]\ngpus_per_node: 1\nlayout: {tensor_parallel: 1, tensor_parallel: 1}\n",
            "tensor_parallel",
            5,
            5,
        ),
        ("name: t\nmodel: m\nhosts: [a]\ngpus_per_node: 1\n1: x\n1: y\n", "1", 6, 5),
    ],
    ids=["top-level", "nested", "env", "same-value", "flow-mapping", "non-string"],
)
def test_a_key_given_twice_is_refused_naming_the_key_and_its_lines(text: str, key: str, line: int, first: int) -> None:
    with pytest.raises(InputError) as excinfo:
        load_profile(text, source="dup.yaml")
    message = str(excinfo.value)
    assert message.startswith(f"dup.yaml: duplicate key '{key}' at line {line}"), message
    assert f"(first at line {first})" in message


def test_merge_keys_are_refused_like_aliases() -> None:
    with pytest.raises(InputError, match=r"merge keys \(<<\) are not allowed in a profile at line 5"):
        load_profile("name: t\nmodel: m\nhosts: [a]\ngpus_per_node: 1\nvllm: {<<: {port: 1}, port: 2}\n", "m.yaml")


@pytest.mark.parametrize("command", [["launch", "/dev/zero", "--dry-run"], ["profiles", "import", "/dev/zero"]])
def test_a_device_is_refused_as_a_profile_without_reading_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    assert main(["--db", str(tmp_path / "m.db"), *command]) == 2
    assert capsys.readouterr().err == "meshdeck: error: /dev/zero: is a character device, not a profile file\n"


@pytest.mark.parametrize("command", [["launch", "{}", "--dry-run"], ["profiles", "import", "{}"]])
def test_a_directory_is_refused_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    args = [part.format(tmp_path) for part in command]
    assert main(["--db", str(tmp_path / "m.db"), *args]) == 2
    assert capsys.readouterr().err == f"meshdeck: error: {tmp_path}: is a directory, not a profile file\n"


@pytest.mark.parametrize("command", [["launch", "{}", "--dry-run"], ["profiles", "import", "{}"]])
def test_an_endless_pipe_is_read_only_up_to_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    fifo = tmp_path / "endless.yaml"
    os.mkfifo(fifo)
    offered = 8 * MAX_PROFILE_BYTES  # stands in for "never ends": the writer gives up after this much
    accepted = 0

    def writer() -> None:
        nonlocal accepted
        chunk = b"#" * 65536
        try:
            with open(fifo, "wb") as pipe:
                while accepted < offered:
                    accepted += pipe.write(chunk)
        except BrokenPipeError:
            pass  # the reader stopped, as it should

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    args = [part.format(fifo) for part in command]
    assert main(["--db", str(tmp_path / "m.db"), *args]) == 2
    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # a writer still waiting for a reader gets one and ends
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert f"larger than the {MAX_PROFILE_BYTES}-byte limit" in capsys.readouterr().err
    pipe_buffer = 1024 * 1024  # what the kernel may take in before the reader closes its end
    assert accepted <= MAX_PROFILE_BYTES + 1 + pipe_buffer, accepted
