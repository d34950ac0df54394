"""Without a prebuilt zipapp, find_agent_package builds one into the user cache dir once, reuses it while
the agent's sources are unchanged, builds anew when they change, and says why when it cannot."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest
from meshdeck.remote import agent_zipapp, bootstrap
from meshdeck.remote.agent_zipapp import AGENT_CACHE_DIR_ENV, agent_source_digest, build_agent_zipapp
from meshdeck.remote.bootstrap import AGENT_PYZ_ENV, find_agent_package
from meshdeck.remote.errors import AgentNotFound
from meshdeck_agent import __version__ as AGENT_VERSION
from meshdeck_agent.protocol import PROTOCOL_VERSION


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No prebuilt zipapp anywhere (no env, no bundled one) and the cache at tmp_path."""
    monkeypatch.delenv(AGENT_PYZ_ENV, raising=False)
    monkeypatch.setattr(bootstrap, "bundled_agent_candidates", lambda: [tmp_path / "absent" / "meshdeck-agent.pyz"])
    cache = tmp_path / "cache"
    monkeypatch.setenv(AGENT_CACHE_DIR_ENV, str(cache))
    return cache


def test_no_prebuilt_zipapp_is_built_once_into_the_cache_and_then_reused(cache_dir: Path, caplog):
    with caplog.at_level("INFO", logger="meshdeck.remote.agent_zipapp"):
        first = find_agent_package()
    assert first.path.parent == cache_dir
    assert first.path.name == f"meshdeck-agent-{agent_source_digest()[:16]}.pyz"
    assert (first.agent_version, first.protocol) == (AGENT_VERSION, PROTOCOL_VERSION)
    assert any("built the agent zipapp" in r.message and str(first.path) in r.message for r in caplog.records)
    built_at = first.path.stat().st_mtime_ns
    caplog.clear()
    with caplog.at_level("INFO", logger="meshdeck.remote.agent_zipapp"):
        second = find_agent_package()
    assert second.path == first.path and second.sha256 == first.sha256
    assert first.path.stat().st_mtime_ns == built_at  # reused, not rewritten
    assert not caplog.records
    assert sorted(p.name for p in cache_dir.iterdir()) == [first.path.name]  # no temp file left


def test_the_cached_build_is_the_same_archive_the_packaging_script_makes(cache_dir: Path, tmp_path: Path):
    cached = find_agent_package().path
    assert cached.read_bytes() == build_agent_zipapp(tmp_path / "dist" / "meshdeck-agent.pyz").read_bytes()
    assert os.access(cached, os.X_OK)


def test_the_cached_build_runs_with_nothing_but_the_standard_library(cache_dir: Path):
    pyz = find_agent_package().path
    # -I: no user site or PYTHON* env; -S: not even this venv's site-packages (where meshdeck_agent is).
    ran = subprocess.run(
        [sys.executable, "-I", "-S", str(pyz), "version", "--json"], capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["agent"] == AGENT_VERSION


def test_changed_agent_sources_build_a_new_zipapp(cache_dir: Path, monkeypatch: pytest.MonkeyPatch):
    first = find_agent_package().path
    monkeypatch.setattr(agent_zipapp, "agent_source_digest", lambda: "f" * 64)
    second = find_agent_package().path
    assert second != first and second.name == f"meshdeck-agent-{'f' * 16}.pyz"
    assert zipfile.is_zipfile(second) and first.exists()


def test_the_digest_follows_the_agent_sources_and_vendored_versions(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    real = agent_source_digest()
    assert real == agent_source_digest()  # stable
    fake_agent = tmp_path / "meshdeck_agent"
    fake_agent.mkdir()
    (fake_agent / "__init__.py").write_text('__version__ = "0.1.0"\n')
    monkeypatch.setattr(agent_zipapp, "agent_source_dir", lambda: fake_agent)
    one = agent_source_digest()
    (fake_agent / "__init__.py").write_text('__version__ = "0.1.1"\n')
    assert agent_source_digest() not in (one, real)
    versions = {"nvidia-ml-py": "1.0", "prometheus_client": "2.0"}
    monkeypatch.setattr(agent_zipapp, "_version", lambda name: versions[name])
    before = agent_source_digest()
    versions["prometheus_client"] = "2.1"
    assert agent_source_digest() != before


def test_hosts_connecting_at_once_build_it_once(cache_dir: Path, monkeypatch: pytest.MonkeyPatch):
    builds = []
    real_write = agent_zipapp._write_atomically

    def counting_write(out: Path, data: bytes) -> None:
        builds.append(out)
        real_write(out, data)

    monkeypatch.setattr(agent_zipapp, "_write_atomically", counting_write)
    start = threading.Barrier(6)
    found: list[Path] = []

    def connect() -> None:
        start.wait(timeout=30)
        found.append(find_agent_package().path)

    threads = [threading.Thread(target=connect) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(found) == 6 and len(set(found)) == 1
    assert len(builds) == 1


def test_two_processes_filling_one_cache_both_end_with_a_whole_zipapp(cache_dir: Path):
    code = "from meshdeck.remote.agent_zipapp import cached_agent_zipapp; print(cached_agent_zipapp())"
    env = {**os.environ, AGENT_CACHE_DIR_ENV: str(cache_dir)}
    processes = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)
    ]
    outputs = [process.communicate(timeout=120)[0].strip() for process in processes]
    assert [process.returncode for process in processes] == [0, 0]
    assert outputs[0] == outputs[1]
    built = Path(outputs[0])
    with zipfile.ZipFile(built) as archive:
        assert archive.testzip() is None
    assert [p.name for p in cache_dir.iterdir()] == [built.name]  # neither left a temp file


def test_an_unwritable_cache_dir_is_named_in_the_error(cache_dir: Path, tmp_path: Path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(AGENT_CACHE_DIR_ENV, str(blocker / "cache"))
    with pytest.raises(AgentNotFound) as failed:
        find_agent_package()
    message = str(failed.value)
    assert "building one in" in message and str(blocker / "cache") in message
    assert "Not a directory" in message and AGENT_CACHE_DIR_ENV in message


def test_a_missing_vendored_dependency_is_named_in_the_error(cache_dir: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(agent_zipapp, "_builds", {})  # nothing built yet in this process
    real_find_spec = agent_zipapp.importlib.util.find_spec
    monkeypatch.setattr(
        agent_zipapp.importlib.util, "find_spec", lambda name: None if name == "pynvml" else real_find_spec(name)
    )
    with pytest.raises(AgentNotFound, match="nvidia-ml-py is not installed here"):
        find_agent_package()
    assert not cache_dir.exists()  # nothing half-built left behind


def test_a_frozen_app_builds_nothing_and_says_its_bundle_lacks_the_zipapp(cache_dir: Path, monkeypatch):
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    with pytest.raises(AgentNotFound, match="not found in this meshdeck bundle"):
        find_agent_package()
    assert not cache_dir.exists()


def test_a_bundled_zipapp_wins_over_the_cache(cache_dir: Path, tmp_path: Path, monkeypatch):
    prebuilt = build_agent_zipapp(tmp_path / "resources" / "meshdeck-agent.pyz")
    monkeypatch.setattr(bootstrap, "bundled_agent_candidates", lambda: [tmp_path / "absent.pyz", prebuilt])
    assert find_agent_package().path == prebuilt
    assert not cache_dir.exists()


def test_a_checkouts_dist_zipapp_is_not_a_candidate():
    """`make agent-pyz` output would go stale when the agent changes; the digest-keyed cache cannot."""
    assert all(path.parent.name == "resources" for path in bootstrap.bundled_agent_candidates())


def test_a_named_zipapp_that_is_missing_is_an_error_not_a_silent_build(cache_dir: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv(AGENT_PYZ_ENV, str(tmp_path / "missing.pyz"))
    with pytest.raises(AgentNotFound, match=r"missing\.pyz \(set by \$MESHDECK_AGENT_PYZ\) does not exist"):
        find_agent_package()
    with pytest.raises(AgentNotFound, match=r"other\.pyz \(given\) does not exist"):
        find_agent_package(tmp_path / "other.pyz")
    assert not cache_dir.exists()


# -- what the cache trusts: a directory of this user alone, and a file only when it is this build ------------------

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
NOBODY = 65534


def test_a_zipapp_planted_under_the_cached_name_is_rebuilt_not_uploaded(cache_dir: Path, tmp_path: Path, caplog):
    """The red-team case: someone who could write to the cache put a tiny zipapp under the name the current
    sources give; it used to be uploaded and run on every server as the operator's SSH user."""
    cache_dir.mkdir(mode=0o700)
    planted = cache_dir / f"meshdeck-agent-{agent_source_digest()[:16]}.pyz"
    with zipfile.ZipFile(planted, "w") as archive:
        archive.writestr("__main__.py", "import os; os.system('id > /tmp/owned')\n")
    with caplog.at_level("WARNING", logger="meshdeck.remote.agent_zipapp"):
        package = find_agent_package()
    build = build_agent_zipapp(tmp_path / "dist" / "meshdeck-agent.pyz").read_bytes()
    assert package.path == planted and planted.read_bytes() == build and package.data == build
    assert (package.agent_version, package.protocol) == (AGENT_VERSION, PROTOCOL_VERSION)
    assert any("is not this meshdeck's build" in r.message and str(planted) in r.message for r in caplog.records)


def test_the_cache_dir_is_made_private_to_the_user(cache_dir: Path):
    find_agent_package()
    assert cache_dir.stat().st_mode & 0o777 == 0o700


def test_a_cache_dir_others_may_only_read_is_made_private(cache_dir: Path):
    cache_dir.mkdir(mode=0o755)
    cache_dir.chmod(0o755)  # what an older meshdeck made
    find_agent_package()
    assert cache_dir.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770])
def test_a_cache_dir_writable_by_others_is_refused_naming_it_and_what_to_do(cache_dir: Path, mode: int):
    cache_dir.mkdir()
    cache_dir.chmod(mode)
    with pytest.raises(AgentNotFound) as refused:
        find_agent_package()
    message = str(refused.value)
    assert f"the agent cache dir {cache_dir} is writable by others (mode {mode:04o})" in message
    assert "chmod 700" in message and AGENT_CACHE_DIR_ENV in message and "of your own" in message
    assert list(cache_dir.iterdir()) == []  # nothing written there


@as_root
def test_a_cache_dir_of_another_user_is_refused(cache_dir: Path):
    cache_dir.mkdir(mode=0o700)
    os.chown(cache_dir, NOBODY, NOBODY)
    with pytest.raises(AgentNotFound, match=rf"{cache_dir} belongs to uid {NOBODY}, not to you \(uid 0\)"):
        find_agent_package()
    assert list(cache_dir.iterdir()) == []


def test_a_cache_dir_that_is_a_symbolic_link_is_refused(cache_dir: Path, tmp_path: Path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    cache_dir.symlink_to(target)
    with pytest.raises(AgentNotFound, match=rf"{cache_dir} is a symbolic link; set \$MESHDECK_AGENT_CACHE_DIR"):
        find_agent_package()
    assert list(target.iterdir()) == []


@pytest.mark.parametrize("mode", [0o666, 0o646, 0o757])
def test_a_named_zipapp_others_can_write_is_refused(cache_dir: Path, tmp_path: Path, monkeypatch, mode: int):
    named = build_agent_zipapp(tmp_path / "mine.pyz")
    named.chmod(mode)
    monkeypatch.setenv(AGENT_PYZ_ENV, str(named))
    with pytest.raises(AgentNotFound, match=rf"{named}: not a file of yours that only you can write .*mode {mode:04o}"):
        find_agent_package()
    named.chmod(0o644)
    assert find_agent_package().path == named  # the user's own file, as they chose it


@as_root
def test_a_named_or_bundled_zipapp_of_another_user_is_refused(cache_dir: Path, tmp_path: Path, monkeypatch):
    theirs = build_agent_zipapp(tmp_path / "resources" / "meshdeck-agent.pyz")
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(AgentNotFound, match=rf"owner uid {NOBODY}"):
        find_agent_package(theirs)
    monkeypatch.setattr(bootstrap, "bundled_agent_candidates", lambda: [theirs])
    with pytest.raises(AgentNotFound, match=rf"owner uid {NOBODY}"):
        find_agent_package()


def test_what_is_uploaded_is_the_bytes_that_were_hashed_even_if_the_file_changes_after(tmp_path: Path):
    pyz = build_agent_zipapp(tmp_path / "meshdeck-agent.pyz")
    package = bootstrap.AgentPackage.from_path(pyz)
    hashed = pyz.read_bytes()
    pyz.write_bytes(b"PK swapped after the check")
    assert package.content() == hashed and hashlib.sha256(package.content()).hexdigest() == package.sha256
