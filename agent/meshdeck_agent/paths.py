"""Where the agent's socket and state live, made safe before anything listens there.

DESIGN §1: the socket is `$XDG_RUNTIME_DIR/meshdeck/agent.sock`, else `~/.cache/meshdeck/agent.sock`,
in a 0700 directory owned by the user, the socket itself 0600. A directory or socket owned by another
user is refused (`UnsafePath`) instead of being used: on a shared GPU server another user could
otherwise read our samples or start processes as us.

Daemon state (workers, their logs, the sample sequence) lives next to the socket by default:
`<dir>/<socket stem>.state/`, so several agents (the demo's demo-a and demo-b) run side by side.

`self_command()` is how the agent re-executes itself (daemon, per-worker keeper, simulated vLLM):
from the zipapp it runs `python <agent.pyz>`, from a checkout `python -m meshdeck_agent`.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import Dict, List, Mapping, Optional

SOCKET_NAME = "agent.sock"
# sun_path is 108 bytes on Linux including the terminating NUL.
MAX_SOCKET_PATH_BYTES = 107


class UnsafePath(Exception):
    """A socket or directory we must not use (owned by someone else, too long, not a directory)."""


def default_socket_path(env: Optional[Mapping[str, str]] = None) -> str:
    if env is None:
        env = os.environ
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        return os.path.join(runtime, "meshdeck", SOCKET_NAME)
    home = env.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".cache", "meshdeck", SOCKET_NAME)


def default_state_dir(socket_path: str) -> str:
    directory, name = os.path.split(os.path.abspath(socket_path))
    stem = name[:-5] if name.endswith(".sock") else name
    return os.path.join(directory, stem + ".state")


def ensure_private_dir(path: str) -> str:
    """Create `path` (and parents) as 0700; refuse one owned by another user. Returns the absolute path."""
    path = os.path.abspath(path)
    os.makedirs(path, mode=0o700, exist_ok=True)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise UnsafePath("%s is a symbolic link; refusing to use it for the agent socket or state" % path)
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafePath("%s is not a directory" % path)
    if info.st_uid != os.geteuid():
        raise UnsafePath(
            "%s is owned by uid %d, not by this user (uid %d); refusing to use it" % (path, info.st_uid, os.geteuid())
        )
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def child_path(directory: str, name: str) -> str:
    """`<directory>/<name>` for a `name` that is one plain path component; UnsafePath otherwise.

    Names that come from a peer (worker ids) become directories the agent later replaces with rmtree:
    empty, `.`, `..`, a hidden name, a separator or a NUL would name the directory itself, its parent
    or somewhere else. The result is checked to sit directly inside `directory`."""
    if not name or name.startswith(".") or os.sep in name or "\x00" in name:
        raise UnsafePath("%r is not a plain name for an entry of %s" % (name[:80], directory))
    path = os.path.join(directory, name)
    if os.path.dirname(path) != os.path.normpath(directory):
        raise UnsafePath("%r would not stay inside %s" % (name[:80], directory))
    return path


def check_socket_path(socket_path: str) -> str:
    """Validate a socket path before binding or connecting; returns it absolute.

    Makes its directory private (0700, ours). An existing socket file owned by someone else is refused.
    """
    socket_path = os.path.abspath(socket_path)
    if len(os.fsencode(socket_path)) > MAX_SOCKET_PATH_BYTES:
        raise UnsafePath(
            "socket path %s is %d bytes; Unix sockets allow at most %d (pick a shorter --socket)"
            % (socket_path, len(os.fsencode(socket_path)), MAX_SOCKET_PATH_BYTES)
        )
    ensure_private_dir(os.path.dirname(socket_path))
    try:
        info = os.lstat(socket_path)
    except FileNotFoundError:
        return socket_path
    if not stat.S_ISSOCK(info.st_mode):
        raise UnsafePath("%s exists and is not a socket; refusing to replace it" % socket_path)
    if info.st_uid != os.geteuid():
        raise UnsafePath("socket %s is owned by uid %d, not by this user; refusing it" % (socket_path, info.st_uid))
    return socket_path


def running_from_zipapp() -> Optional[str]:
    """The .pyz path when this package is imported from a zipapp, else None."""
    here = os.path.abspath(__file__)
    marker = ".pyz" + os.sep
    index = here.find(marker)
    if index < 0:
        return None
    return here[: index + len(".pyz")]


def self_command() -> List[str]:
    """argv prefix that runs this same agent code again (`<prefix> serve ...`, `<prefix> keeper ...`)."""
    pyz = running_from_zipapp()
    if pyz:
        return [sys.executable, "-I", pyz]
    return [sys.executable, "-m", "meshdeck_agent"]


def self_env(base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Environment for a re-executed agent: makes `-m meshdeck_agent` importable from a checkout."""
    env = dict(os.environ if base is None else base)
    if running_from_zipapp():
        return env
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    existing = env.get("PYTHONPATH", "")
    parts = [p for p in existing.split(os.pathsep) if p]
    if package_parent not in parts:
        env["PYTHONPATH"] = os.pathsep.join([package_parent, *parts])
    return env


def atomic_write(path: str, data: bytes, mode: int = 0o600) -> None:
    """Write `data` to `path` so a reader sees the old or the new content, never half of it."""
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, ".%s.%d.tmp" % (os.path.basename(path), os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
