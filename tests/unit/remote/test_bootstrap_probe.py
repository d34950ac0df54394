"""The bootstrap probe: the real sh + python snippets run locally, and each failure becomes one clear line."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from unittest.mock import ANY

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from meshdeck.remote.agent_zipapp import build_agent_zipapp
from meshdeck.remote.bootstrap import (
    RUN_REFUSED_EXIT,
    RUN_REFUSED_MARK,
    AgentPackage,
    RemotePlatform,
    check_platform,
    find_agent_package,
    parse_probe,
    probe_argv,
    run_verified_argv,
)
from meshdeck.remote.errors import AgentNotFound, BootstrapError
from meshdeck_agent import __version__ as AGENT_VERSION
from meshdeck_agent.protocol import PROTOCOL_VERSION


def _run_probe(cache_dir: str, pythons: list[str], agent_name: str = "agent-x.pyz") -> tuple[int, bytes, bytes]:
    done = subprocess.run(probe_argv(cache_dir, agent_name, pythons), capture_output=True, timeout=60)
    return done.returncode, done.stdout, done.stderr


def _fake_python(tmp_path: Path, version: str) -> str:
    """An executable that answers the version query like a python of `version` would."""
    path = tmp_path / f"python{version}"
    path.write_text(f"#!/bin/sh\necho {version}\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def package(tmp_path: Path) -> AgentPackage:
    pyz = tmp_path / "meshdeck-agent.pyz"
    pyz.write_bytes(b"PK fake zipapp bytes")
    return AgentPackage.from_path(pyz)


def test_probe_reports_python_arch_cache_dir_and_free_space(tmp_path: Path):
    cache = tmp_path / "home" / ".cache" / "meshdeck"
    status, out, err = _run_probe(str(cache), [sys.executable])
    platform = parse_probe("gpu-a", status, out, err, [sys.executable])
    assert platform.python_version == tuple(sys.version_info[:3])
    assert platform.machine == os.uname().machine
    assert platform.cache_dir == str(cache) and cache.is_dir() and (cache.stat().st_mode & 0o777) == 0o700
    assert platform.free_bytes and platform.free_bytes > 0
    assert platform.agent_sha256 is None and platform.error is None


def test_probe_hashes_an_agent_already_in_the_cache(tmp_path: Path, package: AgentPackage):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / package.remote_name).write_bytes(package.path.read_bytes())
    status, out, err = _run_probe(str(cache), [sys.executable], package.remote_name)
    assert parse_probe("gpu-a", status, out, err, [sys.executable]).agent_sha256 == package.sha256


def test_first_python_that_is_new_enough_is_used(tmp_path: Path):
    old = _fake_python(tmp_path, "3.6.9")
    pythons = ["/nonexistent/python3", old, sys.executable]
    platform = parse_probe("gpu-a", *_run_probe(str(tmp_path / "c"), pythons), pythons)
    assert platform.python_version == tuple(sys.version_info[:3])


def test_no_python_at_all_is_one_clear_error(tmp_path: Path):
    pythons = ["/nonexistent/python3", "/nonexistent/python3.11"]
    with pytest.raises(BootstrapError) as failed:
        parse_probe("gpu-a", *_run_probe(str(tmp_path / "c"), pythons), pythons)
    assert failed.value.reason == "no_python"
    assert str(failed.value).startswith("gpu-a: no python3 found (tried /nonexistent/python3, /nonexistent/python3.11")


def test_too_old_python_names_the_version_found(tmp_path: Path):
    pythons = [_fake_python(tmp_path, "3.8.10"), _fake_python(tmp_path, "2.7.18")]
    with pytest.raises(BootstrapError) as failed:
        parse_probe("gpu-a", *_run_probe(str(tmp_path / "c"), pythons), pythons)
    assert failed.value.reason == "python_too_old"
    assert "3.8.10" in str(failed.value) and "2.7.18" in str(failed.value) and "3.9 or newer" in str(failed.value)


def test_cache_dir_that_cannot_be_created_is_not_writable(tmp_path: Path, package: AgentPackage):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    platform = parse_probe("gpu-a", *_run_probe(str(blocker / "meshdeck"), [sys.executable]), [sys.executable])
    with pytest.raises(BootstrapError) as failed:
        check_platform("gpu-a", platform, package)
    assert failed.value.reason == "not_writable" and str(blocker / "meshdeck") in str(failed.value)


_VALID_PROBE = {
    "python": "/usr/bin/python3",
    "version": [3, 10, 12],
    "machine": "x86_64",
    "system": "Linux",
    "home": "/home/ops",
    "cache_dir": "/home/ops/.cache/meshdeck",
    "free_bytes": 10**12,
    "agent_sha256": None,
    "error": None,
}


def _platform(**changes) -> RemotePlatform:
    base = {k: v for k, v in _VALID_PROBE.items() if k != "version"} | {"python_version": (3, 10, 12)}
    return RemotePlatform(**{**base, **changes})


def test_read_only_home_is_reported_as_such(package: AgentPackage):
    error = {"stage": "mkdir", "errno": "EROFS", "message": "Read-only file system", "path": "/home/ops/.cache"}
    with pytest.raises(BootstrapError) as failed:
        check_platform("gpu-a", _platform(error=error), package)
    assert failed.value.reason == "read_only"
    assert str(failed.value) == (
        "gpu-a: /home/ops/.cache is on a read-only file system (Read-only file system); "
        "set the host's remote cache dir to a writable place"
    )


def test_full_disk_is_reported_with_free_and_needed_space(package: AgentPackage):
    with pytest.raises(BootstrapError) as failed:
        check_platform("gpu-a", _platform(free_bytes=1024), package)
    assert failed.value.reason == "no_disk_space" and "1 KiB free" in str(failed.value)
    error = {"stage": "write", "errno": "ENOSPC", "message": "No space left on device", "path": "/home/ops/.cache"}
    with pytest.raises(BootstrapError, match=r"no disk space in /home/ops/\.cache"):
        check_platform("gpu-a", _platform(error=error), package)


def test_full_disk_does_not_matter_when_the_agent_is_already_there(package: AgentPackage):
    check_platform("gpu-a", _platform(free_bytes=0, agent_sha256=package.sha256), package)


def test_garbage_from_the_probe_is_a_probe_failure():
    with pytest.raises(BootstrapError, match="probe failed: sh: 1: cannot fork") as failed:
        parse_probe("gpu-a", 2, b"", b"sh: 1: cannot fork", ["python3"])
    assert failed.value.reason == "probe_failed"
    with pytest.raises(BootstrapError):
        parse_probe("gpu-a", 0, json.dumps({"python": "x"}).encode(), b"", ["python3"])


def test_agent_package_is_found_by_explicit_path_or_environment(tmp_path: Path, package: AgentPackage, monkeypatch):
    assert find_agent_package(package.path).sha256 == package.sha256
    monkeypatch.setenv("MESHDECK_AGENT_PYZ", str(package.path))
    assert find_agent_package().path == package.path
    monkeypatch.setenv("MESHDECK_AGENT_PYZ", str(tmp_path / "missing.pyz"))
    with pytest.raises(AgentNotFound, match="make agent-pyz"):
        find_agent_package()


def _agent_zip(path: Path, version: str, protocol: int, module: str = "protocol.py") -> AgentPackage:
    """A zipapp whose version sits where an older agent (protocol.py) or this one (handshake.py) keeps it."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("__main__.py", "")
        archive.writestr("meshdeck_agent/__init__.py", f'"""doc"""\n\n__version__ = "{version}"\n')
        archive.writestr(f"meshdeck_agent/{module}", f"import json\n\nPROTOCOL_VERSION = {protocol}\nMAX = 1\n")
        if module != "protocol.py":
            archive.writestr("meshdeck_agent/protocol.py", "from .handshake import PROTOCOL_VERSION\n")
    return AgentPackage.from_path(path)


def test_the_protocol_is_read_from_handshake_py_and_from_an_older_agents_protocol_py(tmp_path: Path) -> None:
    assert _agent_zip(tmp_path / "new.pyz", "0.2.0", 3, module="handshake.py").protocol == 3
    assert _agent_zip(tmp_path / "old.pyz", "0.1.0", 2).protocol == 2


def test_a_stale_local_zipapp_is_refused_naming_both_protocols(tmp_path: Path) -> None:
    stale = _agent_zip(tmp_path / "old.pyz", "0.0.7", 0)
    assert (stale.agent_version, stale.protocol) == ("0.0.7", 0)
    with pytest.raises(BootstrapError) as refused:
        stale.check_protocol("gpu-a")
    message = str(refused.value)
    assert refused.value.reason == "stale_agent" and refused.value.permanent
    assert "agent 0.0.7 speaking protocol 0" in message and "this meshdeck speaks protocol 1" in message
    assert "make agent-pyz" in message
    _agent_zip(tmp_path / "current.pyz", AGENT_VERSION, 1).check_protocol("gpu-a")  # matching: accepted
    AgentPackage.from_path(tmp_path / "current.pyz")  # and read the same way again


def test_a_zipapp_of_this_protocol_but_another_agent_version_is_refused(tmp_path: Path) -> None:
    other = _agent_zip(tmp_path / "other.pyz", "0.0.1", PROTOCOL_VERSION, module="handshake.py")
    with pytest.raises(BootstrapError) as refused:
        other.check_protocol("gpu-a")
    assert refused.value.reason == "stale_agent"
    assert f"is agent 0.0.1 speaking protocol {PROTOCOL_VERSION}" in str(refused.value)
    assert f"with agent {AGENT_VERSION}" in str(refused.value)


def test_a_zip_declaring_no_protocol_is_refused_before_anything_is_uploaded(tmp_path: Path) -> None:
    planted = tmp_path / "planted.pyz"  # the red team's 191-byte zipapp: a __main__.py and nothing else
    with zipfile.ZipFile(planted, "w") as archive:
        archive.writestr("__main__.py", "import os; os.system('id > /tmp/owned')\n")
    package = AgentPackage.from_path(planted)
    assert (package.agent_version, package.protocol) == (None, None)
    with pytest.raises(BootstrapError) as refused:
        package.check_protocol("gpu-a")
    assert refused.value.reason == "stale_agent" and "declares no agent protocol" in str(refused.value)


def test_a_stale_zipapp_is_refused_before_the_server_is_contacted(tmp_path: Path) -> None:
    from meshdeck.remote.connectors import SshConnector
    from meshdeck.remote.hostkeys import HostKeyStore
    from meshdeck.remote.sshconfig import resolve_route

    route = resolve_route("127.0.0.1", port=1, config_path=None)  # nothing listens: connecting would fail
    connector = SshConnector(route, HostKeyStore(tmp_path / "kh"), package=_agent_zip(tmp_path / "o.pyz", "0.0.7", 0))
    with pytest.raises(BootstrapError, match="speaking protocol 0"):
        connector.open(lambda _message: None)


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=8,
)
_RAW_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


@settings(deadline=None, max_examples=400)
@given(
    overrides=st.dictionaries(st.sampled_from(sorted(_VALID_PROBE)), _JSON_VALUES, max_size=4),
    error=st.none() | st.dictionaries(st.sampled_from(["errno", "message", "path", "stage"]), _JSON_VALUES),
    stderr=st.binary(max_size=200),
)
def test_any_probe_answer_is_a_platform_or_one_bootstrap_error_without_raw_controls(
    overrides: dict, error: dict | None, stderr: bytes
):
    """A hostile or broken server's probe output never tracebacks, and nothing it said reaches a terminal raw."""
    answer = {**_VALID_PROBE, "error": error, **overrides}
    package = AgentPackage(Path("/nonexistent.pyz"), "0" * 64, 1000)
    try:
        platform = parse_probe("gpu-a", 0, json.dumps(answer).encode(), stderr, ["python3"])
        check_platform("gpu-a", platform, package)
    except BootstrapError as exc:
        assert not _RAW_CONTROL.search(str(exc)), str(exc)


def test_control_characters_from_the_probe_are_escaped_in_its_error():
    with pytest.raises(BootstrapError) as failed:
        parse_probe("gpu-a", 2, b"", b"\x1b[2Jsh: cannot fork\r", ["python3"])
    assert "\\x1b[2Jsh: cannot fork" in str(failed.value) and "\x1b" not in str(failed.value)


# -- the remote cache dir must be the SSH user's alone ------------------------------------------------------------


def _probe_platform(cache: Path) -> RemotePlatform:
    return parse_probe("gpu-a", *_run_probe(str(cache), [sys.executable]), [sys.executable])


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775])
def test_a_remote_cache_dir_others_can_write_is_refused(tmp_path: Path, package: AgentPackage, mode: int):
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(mode)
    with pytest.raises(BootstrapError) as refused:
        check_platform("gpu-a", _probe_platform(cache), package)
    assert refused.value.reason == "unsafe_cache_dir" and refused.value.permanent
    assert f"gpu-a: the remote cache dir {cache} is writable by others (mode {mode:04o})" in str(refused.value)
    assert "--remote-cache-dir" in str(refused.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_remote_cache_dir_of_another_user_is_refused(tmp_path: Path, package: AgentPackage):
    cache = tmp_path / "theirs"
    cache.mkdir(mode=0o700)
    os.chown(cache, 65534, 65534)
    with pytest.raises(BootstrapError, match=r"belongs to uid 65534, not to this user \(uid 0\)") as refused:
        check_platform("gpu-a", _probe_platform(cache), package)
    assert refused.value.reason == "unsafe_cache_dir"


def test_a_remote_cache_dir_that_is_a_symbolic_link_is_refused(tmp_path: Path, package: AgentPackage):
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(BootstrapError, match=r"link is a symbolic link"):
        check_platform("gpu-a", _probe_platform(tmp_path / "link"), package)


def test_a_remote_cache_dir_others_may_only_read_is_made_private(tmp_path: Path, package: AgentPackage):
    cache = tmp_path / "mine"
    cache.mkdir()
    cache.chmod(0o755)
    check_platform("gpu-a", _probe_platform(cache), package)
    assert cache.stat().st_mode & 0o777 == 0o700


# -- the remote runner: the uploaded file runs only while it is the one uploaded -------------------------------------


@pytest.fixture
def uploaded(tmp_path: Path) -> tuple[Path, str]:
    """A real agent zipapp as the upload leaves it: 0600 in a 0700 directory; and its SHA-256."""
    folder = tmp_path / "remote-cache"
    folder.mkdir(mode=0o700)
    pyz = folder / "agent-x.pyz"
    pyz.write_bytes(build_agent_zipapp(tmp_path / "build.pyz").read_bytes())
    pyz.chmod(0o600)
    return pyz, hashlib.sha256(pyz.read_bytes()).hexdigest()


def _run_verified(pyz: Path, sha256: str) -> subprocess.CompletedProcess[str]:
    argv = run_verified_argv(sys.executable, str(pyz), sha256, ["version", "--json"])
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env={"PATH": os.environ["PATH"]})


def test_the_remote_runner_runs_the_agent_when_it_has_the_uploaded_sha256(uploaded: tuple[Path, str]):
    ran = _run_verified(*uploaded)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == {"agent": AGENT_VERSION, "protocol": PROTOCOL_VERSION, "python": ANY}


def test_the_remote_runner_refuses_a_file_changed_after_the_upload(uploaded: tuple[Path, str]):
    pyz, sha256 = uploaded
    with pyz.open("ab") as handle:
        handle.write(b"\n")  # still a runnable zip: Python finds the archive from its end
    ran = _run_verified(pyz, sha256)
    assert ran.returncode == RUN_REFUSED_EXIT and ran.stdout == ""
    assert ran.stderr.startswith(f"{RUN_REFUSED_MARK}{pyz} has SHA-256 ")
    assert f"not {sha256} as uploaded: it was changed on the server" in ran.stderr


@pytest.mark.parametrize(("file_mode", "dir_mode", "why"), [
    (0o666, 0o700, "is not a file of this user that only this user can write"),
    (0o600, 0o777, "which is not this user's alone"),
    (0o600, 0o1777, "which is not this user's alone"),
])  # fmt: skip
def test_the_remote_runner_refuses_a_file_others_could_change(
    uploaded: tuple[Path, str], file_mode: int, dir_mode: int, why: str
):
    pyz, sha256 = uploaded
    pyz.chmod(file_mode)
    pyz.parent.chmod(dir_mode)
    ran = _run_verified(pyz, sha256)
    assert ran.returncode == RUN_REFUSED_EXIT and why in ran.stderr


def test_the_remote_runner_does_not_follow_a_symbolic_link(uploaded: tuple[Path, str]):
    pyz, sha256 = uploaded
    link = pyz.with_name("agent-link.pyz")
    link.symlink_to(pyz)
    ran = _run_verified(link, sha256)
    assert ran.returncode == RUN_REFUSED_EXIT and "cannot be opened" in ran.stderr
