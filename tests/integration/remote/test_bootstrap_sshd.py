"""Bootstrap over a real sshd: upload from nothing, no re-upload on a matching hash, upgrade on a new one."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest
from meshdeck.remote.bootstrap import AgentPackage, bootstrap
from meshdeck.remote.errors import BootstrapError
from meshdeck.remote.ssh import connect
from meshdeck.remote.sshconfig import resolve_route
from meshdeck_agent import __version__ as AGENT_VERSION
from meshdeck_agent.protocol import PROTOCOL_VERSION
from sshd import SshdServer

pytestmark = pytest.mark.sshd


def _zipapp(path: Path, marker: str) -> AgentPackage:
    """A zipapp that prints `marker`, declaring this app's agent version and protocol (bootstrap refuses any
    other); its agent's main prints the marker too, as the verified runner starts it."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("__main__.py", f"print({marker!r})\n")
        archive.writestr("meshdeck_agent/__init__.py", f'__version__ = "{AGENT_VERSION}"\n')
        archive.writestr("meshdeck_agent/handshake.py", f"PROTOCOL_VERSION = {PROTOCOL_VERSION}\n")
        archive.writestr("meshdeck_agent/__main__.py", f"def main():\n    print({marker!r})\n    return 0\n")
    return AgentPackage.from_path(path)


@pytest.fixture
def conn(sshd: SshdServer, ssh_client_key: Path, trusting_store, no_agent_options):
    route = resolve_route("127.0.0.1", port=sshd.port, identity_file=str(ssh_client_key), config_path=None)
    with connect(route, trusting_store, no_agent_options) as connection:
        yield connection


def test_bootstrap_from_nothing_uploads_atomically_and_the_agent_runs(conn, tmp_path: Path):
    package = _zipapp(tmp_path / "v1.pyz", "agent v1")
    cache = tmp_path / "remote-home" / ".cache" / "meshdeck"
    progress: list[str] = []
    result = bootstrap(conn, package, cache_dir=str(cache), progress=progress.append)
    assert result.uploaded and result.agent_path == f"{cache}/agent-{package.sha256[:16]}.pyz"
    uploaded = Path(result.agent_path)
    assert hashlib.sha256(uploaded.read_bytes()).hexdigest() == package.sha256
    assert uploaded.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in cache.iterdir()) == [uploaded.name]  # no temp file left behind
    assert result.platform.machine and result.platform.python_version >= (3, 9)
    assert progress == ["probing python3 and the cache dir", f"uploading the agent ({package.size // 1024} KiB)"]
    ran = conn.run([result.platform.python, result.agent_path])
    assert ran.stdout.decode().strip() == "agent v1"


def test_matching_hash_is_not_uploaded_again(conn, tmp_path: Path):
    package = _zipapp(tmp_path / "v1.pyz", "agent v1")
    cache = tmp_path / "cache"
    first = bootstrap(conn, package, cache_dir=str(cache))
    before = Path(first.agent_path).stat()
    second = bootstrap(conn, package, cache_dir=str(cache))
    assert first.uploaded and not second.uploaded
    after = Path(second.agent_path).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_forced_bootstrap_uploads_again_even_when_the_hash_matches(conn, tmp_path: Path):
    package = _zipapp(tmp_path / "v1.pyz", "agent v1")
    cache = tmp_path / "cache"
    first = bootstrap(conn, package, cache_dir=str(cache))
    before = Path(first.agent_path).stat()
    again = bootstrap(conn, package, cache_dir=str(cache), force=True)  # the agent answered in another protocol
    assert again.uploaded and again.agent_path == first.agent_path
    assert Path(again.agent_path).stat().st_ino != before.st_ino  # a new file renamed into place
    assert conn.run([again.platform.python, again.agent_path]).stdout.decode().strip() == "agent v1"


def test_differing_hash_uploads_the_new_agent(conn, tmp_path: Path):
    cache = tmp_path / "cache"
    old = bootstrap(conn, _zipapp(tmp_path / "v1.pyz", "agent v1"), cache_dir=str(cache))
    new_package = _zipapp(tmp_path / "v2.pyz", "agent v2")
    new = bootstrap(conn, new_package, cache_dir=str(cache))
    assert new.uploaded and new.agent_path != old.agent_path
    assert conn.run([new.platform.python, new.agent_path]).stdout.decode().strip() == "agent v2"


def test_corrupt_copy_with_the_right_name_is_replaced(conn, tmp_path: Path):
    package = _zipapp(tmp_path / "v1.pyz", "agent v1")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / package.remote_name).write_bytes(b"half an upload")
    assert bootstrap(conn, package, cache_dir=str(cache)).uploaded
    assert hashlib.sha256((cache / package.remote_name).read_bytes()).hexdigest() == package.sha256


def test_server_without_python3_is_one_clear_error(conn, tmp_path: Path):
    package = _zipapp(tmp_path / "v1.pyz", "agent v1")
    with pytest.raises(BootstrapError) as failed:
        bootstrap(conn, package, cache_dir=str(tmp_path / "cache"), pythons=["/opt/nowhere/python3"])
    assert failed.value.reason == "no_python" and "no python3 found" in str(failed.value)


def test_unwritable_cache_dir_is_one_clear_error(conn, tmp_path: Path):
    blocker = tmp_path / "plain-file"
    blocker.write_text("x")
    with pytest.raises(BootstrapError) as failed:
        bootstrap(conn, _zipapp(tmp_path / "v1.pyz", "v1"), cache_dir=str(blocker / "meshdeck"))
    assert failed.value.reason == "not_writable" and "ENOTDIR" in str(failed.value)
