"""Socket placement and ownership checks: 0700 directories of our own, foreign sockets refused."""

from __future__ import annotations

import os
import socket
import stat

import pytest
from meshdeck_agent.paths import (
    UnsafePath,
    check_socket_path,
    child_path,
    default_socket_path,
    default_state_dir,
    ensure_private_dir,
    self_command,
)


def test_default_socket_prefers_xdg_runtime_dir(tmp_path):
    assert default_socket_path({"XDG_RUNTIME_DIR": str(tmp_path), "HOME": "/home/x"}) == str(
        tmp_path / "meshdeck" / "agent.sock"
    )


def test_default_socket_falls_back_to_the_cache_dir():
    assert default_socket_path({"HOME": "/home/op"}) == "/home/op/.cache/meshdeck/agent.sock"


def test_state_dir_sits_next_to_the_socket_named_after_it():
    assert default_state_dir("/run/user/1/meshdeck/demo-a.sock") == "/run/user/1/meshdeck/demo-a.state"


def test_private_dir_is_created_0700_and_an_open_one_is_tightened(tmp_path):
    target = tmp_path / "a" / "b"
    ensure_private_dir(str(target))
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o700
    os.chmod(target, 0o755)
    ensure_private_dir(str(target))
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create files owned by another user")
def test_a_directory_owned_by_another_user_is_refused(tmp_path):
    target = tmp_path / "theirs"
    target.mkdir()
    os.chown(target, 12345, 12345)
    with pytest.raises(UnsafePath, match="owned by uid 12345"):
        ensure_private_dir(str(target))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create files owned by another user")
def test_a_socket_owned_by_another_user_is_refused(tmp_path):
    directory = tmp_path / "d"
    ensure_private_dir(str(directory))
    path = directory / "agent.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    os.chown(path, 12345, 12345)
    try:
        with pytest.raises(UnsafePath, match="owned by uid 12345"):
            check_socket_path(str(path))
    finally:
        server.close()


def test_a_regular_file_in_place_of_the_socket_is_refused(tmp_path):
    directory = tmp_path / "d"
    ensure_private_dir(str(directory))
    (directory / "agent.sock").write_text("not a socket")
    with pytest.raises(UnsafePath, match="not a socket"):
        check_socket_path(str(directory / "agent.sock"))


def test_a_socket_path_longer_than_sun_path_is_refused_with_the_limit(tmp_path):
    with pytest.raises(UnsafePath, match="at most 107"):
        check_socket_path("/tmp/" + "x" * 120 + "/agent.sock")


def test_self_command_runs_the_package_from_a_checkout():
    assert self_command()[-2:] == ["-m", "meshdeck_agent"]


@pytest.mark.parametrize("name", ["", ".", "..", ".hidden", "a/b", "../up", "a\x00b", "/abs"])
def test_child_path_refuses_names_that_are_not_one_plain_entry(tmp_path, name):
    with pytest.raises(UnsafePath):
        child_path(str(tmp_path), name)


@pytest.mark.parametrize("name", ["w1", "dep-0101.head", "a..b", "-x", "_"])
def test_child_path_joins_plain_names_directly_inside_the_directory(tmp_path, name):
    assert child_path(str(tmp_path), name) == str(tmp_path / name)
