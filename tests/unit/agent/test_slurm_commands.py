"""The agent's `slurm.run` (only Slurm's client commands, argv, bounded, timed) and `files.read` (a regular file,
from an offset or its tail), on real subprocesses and files; and `--watch-engine` parsing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from meshdeck_agent import protocol, slurm
from meshdeck_agent.__main__ import parse_watched


@pytest.fixture
def fake_sinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `sinfo` first on PATH that prints its argv and its stdin, or sleeps, or floods stdout."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "sinfo"
    script.write_text(
        "#!/bin/bash\n"
        'case "$1" in\n'
        "  --sleep) sleep 30 ;;\n"
        "  --flood) head -c 3000000 /dev/zero | tr '\\0' x ;;\n"
        '  --fail) echo "sinfo: error: nope" >&2; exit 1 ;;\n'
        '  *) printf "%s|" "$@"; cat ;;\n'
        "esac\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return script


def test_a_slurm_command_runs_as_argv_with_stdin_and_its_status(fake_sinfo: Path) -> None:
    done = slurm.run_slurm({"command": "sinfo", "args": ["-h", "a b;$(x)"], "stdin": "script"})
    assert done["rc"] == 0 and done["stdout"] == "-h|a b;$(x)|script" and not done["truncated"]
    assert done["command"][0] == str(fake_sinfo)
    failed = slurm.run_slurm({"command": "sinfo", "args": ["--fail"]})
    assert failed["rc"] == 1 and "nope" in failed["stderr"]


def test_output_is_cut_and_a_slow_command_is_killed(fake_sinfo: Path) -> None:
    flood = slurm.run_slurm({"command": "sinfo", "args": ["--flood"]})
    assert flood["truncated"] and len(flood["stdout"]) == slurm.MAX_OUTPUT_BYTES
    with pytest.raises(protocol.ProtocolError, match=r"did not finish in 0.5 s"):
        slurm.run_slurm({"command": "sinfo", "args": ["--sleep"], "timeout_s": 0.5})


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"command": "bash"}, "command"),
        ({"command": "sinfo", "args": ["x"] * 65}, "args"),
        ({"command": "sinfo", "args": ["a\nb"]}, "args[0]"),
        ({"command": "sinfo", "args": [3]}, "args[0]"),
    ],
)
def test_anything_but_slurms_commands_and_plain_arguments_is_refused(params: dict, field: str) -> None:
    with pytest.raises(protocol.ProtocolError, match=rf"^{field.replace('[', '.').replace(']', '.')}"):
        slurm.run_slurm(params)


def test_the_request_schema_bounds_stdin_and_the_argument_list() -> None:
    request = protocol.Request(1, "slurm.run", {"command": "sinfo", "stdin": "x" * (4 * 1024 * 1024 + 1)})
    with pytest.raises(protocol.ProtocolError, match="stdin"):
        protocol.validate_params(request)


def test_files_read_reads_from_an_offset_or_the_tail_of_regular_files_only(tmp_path: Path) -> None:
    path = tmp_path / "job.out"
    path.write_text("0123456789")
    assert slurm.read_file({"path": str(path), "offset": 2, "limit": 3}) | {"path": ""} == {
        "path": "", "size": 10, "offset": 2, "data": "234", "eof": False
    }  # fmt: skip
    tail = slurm.read_file({"path": str(path), "tail": 4})
    assert (tail["offset"], tail["data"], tail["eof"]) == (6, "6789", True)
    with pytest.raises(protocol.ProtocolError, match="not a regular file"):
        slurm.read_file({"path": str(tmp_path)})
    with pytest.raises(protocol.ProtocolError) as missing:
        slurm.read_file({"path": str(tmp_path / "nope")})
    assert missing.value.code == protocol.NOT_FOUND


def test_watched_engines_are_worker_ids_with_http_urls() -> None:
    assert parse_watched(["d.vllm-node0=http://127.0.0.1:8000/metrics"]) == (
        ("d.vllm-node0", "http://127.0.0.1:8000/metrics"),
    )
    for bad in ("noequals", "bad id=http://x/metrics", "w=file:///etc/passwd"):
        with pytest.raises(ValueError, match="--watch-engine"):
            parse_watched([bad])
    with pytest.raises(ValueError, match="at most 16"):
        parse_watched([f"w{i}=http://x/metrics" for i in range(17)])
