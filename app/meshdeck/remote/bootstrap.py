"""Put the agent on a server: find python3 (>= 3.9) and the architecture, upload the zipapp if needed.

One exec runs a POSIX sh snippet that tries each python candidate, skips those older than 3.9, and
runs a small probe with the first good one. The probe reports the interpreter, `platform.machine()`,
the absolute cache dir (default `~/.cache/meshdeck`, created 0700), whether a file can be written
there, free bytes, and the SHA-256 of `agent-<hash>.pyz` if present. When that hash equals the local
zipapp's, nothing is uploaded (unless `force`: after an agent answered with another protocol, the app
uploads it again); otherwise SFTP writes `.agent-<hash>.pyz.<random>.tmp` and renames it into place, so
a reader never sees half a file. A local zipapp built for another protocol or agent version than this app
runs (a stale dist/meshdeck-agent.pyz), or one declaring none, is refused before anything is uploaded, naming
both versions. Each failure is one `BootstrapError` line: no python3,
python too old (naming the version found), read-only home, not writable, no disk space, upload failed.

What is uploaded and run is checked end to end. The local zipapp is read once, from a file of this user (or
root) that no one else can write, and those bytes are hashed, checked for their versions and uploaded. The
remote cache dir must be this SSH user's and writable by no one else (the probe makes it 0700 and refuses
another owner's, a group- or world-writable one, or a symbolic link). The uploaded file is run through
`run_verified_argv`: a few lines of Python on the server that open it, check again that it is the user's
alone, hash it and run it only when the SHA-256 is the one uploaded (else exit RUN_REFUSED_EXIT, one line
on stderr), so a file changed on the server between the probe and the start never runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import re
import secrets
import stat
import sys
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko
from meshdeck_agent import __version__ as AGENT_VERSION
from meshdeck_agent.protocol import PROTOCOL_VERSION

from meshdeck.core.text import printable
from meshdeck.remote import agent_zipapp
from meshdeck.remote.errors import AgentNotFound, BootstrapError, ConnectionLost, RemoteOutputTooLarge
from meshdeck.remote.ssh import SshConnection

log = logging.getLogger(__name__)

MIN_PYTHON = (3, 9)
DEFAULT_CACHE_DIR = "~/.cache/meshdeck"
DEFAULT_PYTHONS = ("python3",)
FREE_SPACE_MARGIN_BYTES = 4 * 1024 * 1024
AGENT_PYZ_ENV = "MESHDECK_AGENT_PYZ"
AGENT_PYZ_NAME = "meshdeck-agent.pyz"
_NO_PYTHON_MARK = "MESHDECK-NO-PYTHON"
_NO_PYTHON_EXIT = 3
MAX_ZIPAPP_BYTES = 64 * 1024 * 1024  # the agent is ~260 KB; a local file past this is not one
RUN_REFUSED_EXIT = 86  # the remote runner refused the agent file (not the user's alone, or another SHA-256)
RUN_REFUSED_MARK = "meshdeck-agent: refused: "

# Runs under the remote login shell as `sh -c FINDER sh PROBE CACHE_DIR AGENT_NAME PYTHON...`.
_FINDER = f"""probe=$1; cache=$2; agent=$3; shift 3
found=
for p in "$@"; do
  v=$("$p" -c 'import sys; print("%d.%d.%d" % tuple(sys.version_info[:3]))' 2>/dev/null) || continue
  case "$v" in
    [0-2].*|3.[0-{MIN_PYTHON[1] - 1}].*) found="$found $p=$v"; continue ;;
  esac
  exec "$p" -c "$probe" "$cache" "$agent"
done
echo "{_NO_PYTHON_MARK}$found"
exit {_NO_PYTHON_EXIT}
"""

# Runs on the server's python (>= 3.9, stdlib only); prints one JSON object.
_PROBE = r"""
import errno, hashlib, json, os, platform, stat, sys
cache, agent = sys.argv[1], sys.argv[2]
out = {"python": sys.executable, "version": list(sys.version_info[:3]), "machine": platform.machine(),
       "system": platform.system(), "home": os.path.expanduser("~"), "error": None, "free_bytes": None,
       "agent_sha256": None}
cache = os.path.abspath(os.path.expanduser(cache))
out["cache_dir"] = cache
def fail(stage, exc):
    out["error"] = {"stage": stage, "errno": errno.errorcode.get(exc.errno or 0, str(exc.errno)),
                    "message": exc.strerror or str(exc), "path": getattr(exc, "filename", None) or cache}
def unsafe(why):
    out["error"] = {"stage": "unsafe", "errno": "UNSAFE", "message": why, "path": cache}
try:
    os.makedirs(cache, mode=0o700, exist_ok=True)
    info = os.lstat(cache)
    if stat.S_ISLNK(info.st_mode):
        unsafe("is a symbolic link")
    elif info.st_uid != os.geteuid():
        unsafe("belongs to uid %d, not to this user (uid %d)" % (info.st_uid, os.geteuid()))
    elif info.st_mode & 0o022:
        unsafe("is writable by others (mode %04o)" % stat.S_IMODE(info.st_mode))
    elif stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(cache, 0o700)
except OSError as exc:
    fail("mkdir", exc)
if out["error"] is None:
    try:
        st = os.statvfs(cache)
        out["free_bytes"] = st.f_bavail * st.f_frsize
    except OSError:
        pass
    test = os.path.join(cache, ".probe-%d" % os.getpid())
    try:
        with open(test, "wb") as f:
            f.write(b"meshdeck")
        os.unlink(test)
    except OSError as exc:
        fail("write", exc)
    path = os.path.join(cache, agent)
    if os.path.isfile(path):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        out["agent_sha256"] = h.hexdigest()
print(json.dumps(out))
"""


# Runs the uploaded agent on the server as `python3 -I -c RUN_VERIFIED <path> <sha256> attach ...` (Python >= 3.9,
# stdlib only): the file must be a regular file of this user, writable by no one else, in a directory of this
# user writable by no one else, and hash to <sha256>; then the agent runs from it as `python3 -I <path>` would.
# The ownership checks keep the file as verified for the daemon and keepers the agent later starts from it.
RUN_VERIFIED = r"""
import hashlib, os, stat, sys
path, want = sys.argv[1], sys.argv[2]
def refuse(why):
    sys.stderr.write("%s%s %s\n" % (__MARK__, path, why))
    sys.exit(__EXIT__)
me, folder = os.geteuid(), os.path.dirname(os.path.abspath(path))
try:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    where = os.stat(folder)
except OSError as exc:
    refuse("cannot be opened: %s" % (exc.strerror or exc))
with os.fdopen(fd, "rb") as f:
    info = os.fstat(f.fileno())
    if not stat.S_ISREG(info.st_mode) or info.st_uid != me or info.st_mode & 0o022:
        refuse("is not a file of this user that only this user can write (owner uid %d, mode %04o)"
               % (info.st_uid, stat.S_IMODE(info.st_mode)))
    if where.st_uid != me or where.st_mode & 0o022:
        refuse("is in %s, which is not this user's alone" % folder)
    h = hashlib.sha256()
    for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
if h.hexdigest() != want:
    refuse("has SHA-256 %s, not %s as uploaded: it was changed on the server" % (h.hexdigest(), want))
sys.argv[:] = [path] + sys.argv[3:]
sys.path.insert(0, path)
from meshdeck_agent.__main__ import main
sys.exit(main())
""".replace("__MARK__", repr(RUN_REFUSED_MARK)).replace("__EXIT__", str(RUN_REFUSED_EXIT))


def run_verified_argv(python: str, agent_path: str, sha256: str, args: Sequence[str]) -> list[str]:
    """argv that runs the agent at `agent_path` on the server with `args`, if it still hashes to `sha256`."""
    return [python, "-I", "-c", RUN_VERIFIED, agent_path, sha256, *args]


def _read_own_file(path: Path) -> bytes:
    """The bytes of the zipapp at `path`, read once from a regular file of this user or root that no one
    else can write; AgentNotFound naming the file and what to do otherwise."""
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:  # a FIFO is refused, not waited on
            info = os.fstat(handle.fileno())
            owners = (os.geteuid(), 0)
            if not stat.S_ISREG(info.st_mode) or info.st_uid not in owners or info.st_mode & 0o022:
                mode = stat.S_IMODE(info.st_mode)
                raise AgentNotFound(
                    f"agent zipapp {path}: not a file of yours that only you can write (owner uid {info.st_uid}, "
                    f"mode {mode:04o}), so it is not uploaded; use a zipapp of your own (`chmod go-w` it) or "
                    f"leave ${AGENT_PYZ_ENV} unset and meshdeck builds one itself"
                )
            data = handle.read(MAX_ZIPAPP_BYTES + 1)
    except OSError as exc:
        raise AgentNotFound(f"agent zipapp {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_ZIPAPP_BYTES:
        raise AgentNotFound(f"agent zipapp {path} is over {MAX_ZIPAPP_BYTES >> 20} MiB: not an agent zipapp")
    return data


@dataclass(frozen=True)
class AgentPackage:
    """The local zipapp to upload: its path, SHA-256 and size, the agent version and protocol it carries
    (read from its meshdeck_agent sources; None when it has none), and its bytes as they were hashed (what
    is uploaded; empty for a stand-in made without from_path, whose file is read and hashed again)."""

    path: Path
    sha256: str
    size: int
    agent_version: str | None = None
    protocol: int | None = None
    data: bytes = field(default=b"", repr=False, compare=False)

    @property
    def remote_name(self) -> str:
        return f"agent-{self.sha256[:16]}.pyz"

    @classmethod
    def from_path(cls, path: str | os.PathLike[str]) -> AgentPackage:
        """The zipapp at `path`, read once (see _read_own_file: a file of this user or root alone)."""
        path = Path(path)
        data = _read_own_file(path)
        version, protocol = _zipapp_versions(data)
        return cls(path, hashlib.sha256(data).hexdigest(), len(data), version, protocol, data)

    def content(self) -> bytes:
        """The bytes to upload: those hashed by from_path, else the file's, which must still hash to sha256."""
        if self.data:
            return self.data
        data = _read_own_file(self.path)
        if hashlib.sha256(data).hexdigest() != self.sha256:
            raise AgentNotFound(f"agent zipapp {self.path} changed since it was hashed; connect again")
        return data

    def check_protocol(self, label: str) -> None:
        """Refuse a zipapp that is not this app's agent: another protocol or agent version, or none declared
        (not a meshdeck agent at all). BootstrapError "stale_agent", naming both."""
        if self.protocol == PROTOCOL_VERSION and self.agent_version == AGENT_VERSION:
            return
        if self.protocol is None:
            found = "declares no agent protocol (it is not a meshdeck agent zipapp)"
        else:
            found = f"is agent {printable(self.agent_version or '?', 64)} speaking protocol {self.protocol}"
        raise BootstrapError(
            "stale_agent",
            f"{label}: the agent zipapp {self.path} {found}, but this meshdeck speaks protocol {PROTOCOL_VERSION} "
            f"with agent {AGENT_VERSION}; rebuild it with `make agent-pyz` (or point ${AGENT_PYZ_ENV} at a "
            f"matching one, or leave it unset and meshdeck builds one itself)",
        )


def _zipapp_versions(data: bytes) -> tuple[str | None, int | None]:
    """(agent version, protocol) from a zipapp's meshdeck_agent/__init__.py and handshake.py, read as text
    (older zipapps have PROTOCOL_VERSION in protocol.py)."""

    def text(archive: zipfile.ZipFile, *candidates: str) -> str:
        names = set(archive.namelist())
        return next((archive.read(name).decode() for name in candidates if name in names), "")

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            init = text(archive, "meshdeck_agent/__init__.py")
            proto = text(archive, "meshdeck_agent/handshake.py", "meshdeck_agent/protocol.py")
    except (OSError, zipfile.BadZipFile, UnicodeDecodeError, ValueError, EOFError, NotImplementedError):
        return None, None
    version = re.search(r"^__version__\s*=\s*[\"']([^\"']+)[\"']", init, re.MULTILINE)
    protocol = re.search(r"^PROTOCOL_VERSION\s*=\s*(\d+)\s*$", proto, re.MULTILINE)
    return (version.group(1) if version else None), (int(protocol.group(1)) if protocol else None)


def bundled_agent_candidates() -> list[Path]:
    """Where a prebuilt zipapp may lie: the package's resources (a PyInstaller bundle ships it there).
    Not dist/ of a checkout: a `make agent-pyz` left there goes stale as soon as the agent's sources
    change, and the cache below is keyed by their digest, so a checkout always uploads what it runs."""
    import meshdeck

    return [Path(meshdeck.__file__).resolve().parent / "resources" / AGENT_PYZ_NAME]


def find_agent_package(explicit: str | os.PathLike[str] | None = None) -> AgentPackage:
    """The zipapp to upload: `explicit`, else $MESHDECK_AGENT_PYZ (either must exist), else a bundled
    one, else one built once from this environment's agent sources into the user cache
    dir ($MESHDECK_AGENT_CACHE_DIR) and reused while those sources are unchanged. A frozen app builds
    nothing (it has no sources to build from: its bundle ships the zipapp)."""
    named = explicit or os.environ.get(AGENT_PYZ_ENV)
    if named:
        path = Path(named)
        if path.is_file():
            return AgentPackage.from_path(path)
        given = "given" if explicit else f"set by ${AGENT_PYZ_ENV}"
        raise AgentNotFound(
            f"agent zipapp {path} ({given}) does not exist; build it with `make agent-pyz`, "
            f"or leave it unset and meshdeck builds one itself"
        )
    candidates = bundled_agent_candidates()
    for candidate in candidates:
        if candidate.is_file():
            return AgentPackage.from_path(candidate)
    looked = ", ".join(str(c) for c in candidates)
    if getattr(sys, "frozen", False):
        raise AgentNotFound(
            f"agent zipapp not found in this meshdeck bundle (looked at {looked}); set ${AGENT_PYZ_ENV}"
        )
    try:
        built, expected = agent_zipapp.cached_agent_build()
    except agent_zipapp.UnsafeCacheDir as exc:
        raise AgentNotFound(str(exc)) from None
    except (agent_zipapp.ZipappBuildError, OSError) as exc:
        reason = f"{exc.strerror}: {exc.filename}" if isinstance(exc, OSError) and exc.filename else str(exc)
        raise AgentNotFound(
            f"agent zipapp not found (looked at {looked}) and building one in {agent_zipapp.agent_cache_dir()} "
            f"failed: {reason}; set ${agent_zipapp.AGENT_CACHE_DIR_ENV} to a writable directory of your own "
            f"or ${AGENT_PYZ_ENV} to a zipapp"
        ) from None
    package = AgentPackage.from_path(built)
    if package.sha256 != expected:  # the cache was checked a moment ago: someone with your rights changed it
        raise AgentNotFound(f"the cached agent zipapp {built} changed while it was read; connect again")
    return package


@dataclass(frozen=True)
class RemotePlatform:
    """What the probe found on the server."""

    python: str
    python_version: tuple[int, int, int]
    machine: str
    system: str
    home: str
    cache_dir: str
    free_bytes: int | None
    agent_sha256: str | None
    error: dict[str, Any] | None = None


@dataclass(frozen=True)
class BootstrapResult:
    platform: RemotePlatform
    agent_path: str  # absolute path of the agent zipapp on the server
    uploaded: bool


Progress = Callable[[str], None]


def probe_argv(cache_dir: str, agent_name: str, pythons: Sequence[str]) -> list[str]:
    return ["sh", "-c", _FINDER, "sh", _PROBE, cache_dir, agent_name, *pythons]


def parse_probe(label: str, exit_status: int, stdout: bytes, stderr: bytes, pythons: Sequence[str]) -> RemotePlatform:
    """Turn the probe's output into a RemotePlatform, or the BootstrapError it implies."""
    text = stdout.decode("utf-8", "replace").strip()
    if exit_status == _NO_PYTHON_EXIT and text.startswith(_NO_PYTHON_MARK):
        found = text[len(_NO_PYTHON_MARK) :].split()
        wanted = ".".join(map(str, MIN_PYTHON))
        if found:
            versions = printable(", ".join(f.replace("=", " is Python ") for f in found), 400)
            raise BootstrapError(
                "python_too_old",
                f"{label}: Python {wanted} or newer is needed; {versions} (install python3 >= {wanted})",
            )
        raise BootstrapError(
            "no_python",
            f"{label}: no python3 found (tried {', '.join(pythons)} on the login PATH); "
            f"install Python >= {wanted} or set the host's python path",
        )
    try:
        data = json.loads(text.splitlines()[-1] if text else "")
        version = tuple(int(v) for v in data["version"][:3])
        if not isinstance(data.get("error"), dict | None) or not isinstance(data.get("free_bytes"), int | None):
            raise TypeError("error must be an object, free_bytes an integer")
        result = RemotePlatform(
            python=str(data["python"]),
            python_version=(version[0], version[1], version[2]),
            machine=str(data["machine"]),
            system=str(data["system"]),
            home=str(data["home"]),
            cache_dir=str(data["cache_dir"]),
            free_bytes=data.get("free_bytes"),
            agent_sha256=data.get("agent_sha256"),
            error=data.get("error"),
        )
    except (ValueError, KeyError, TypeError, IndexError):
        detail = printable((stderr.decode("utf-8", "replace").strip() or text or f"exit status {exit_status}")[-400:])
        raise BootstrapError("probe_failed", f"{label}: the bootstrap probe failed: {detail}") from None
    return result


def check_platform(label: str, platform: RemotePlatform, package: AgentPackage, force: bool = False) -> None:
    """Raise the BootstrapError for a cache dir that cannot take the agent."""
    error = platform.error
    if error:
        code, message, path = (printable(str(error.get(key)), 200) for key in ("errno", "message", "path"))
        if error.get("stage") == "unsafe":
            raise BootstrapError(
                "unsafe_cache_dir",
                f"{label}: the remote cache dir {path} {message}, so the agent is not put there; use a directory "
                f"only this SSH user can write (--remote-cache-dir; default ~/.cache/meshdeck)",
            )
        if code == "EROFS":
            raise BootstrapError(
                "read_only",
                f"{label}: {path} is on a read-only file system ({message}); set the host's remote cache dir to a writable place",
            )
        if code in ("ENOSPC", "EDQUOT"):
            raise BootstrapError("no_disk_space", f"{label}: no disk space in {path} ({message})")
        raise BootstrapError(
            "not_writable", f"{label}: cannot write to {path}: {message} ({code}); set a writable remote cache dir"
        )
    needed = package.size + FREE_SPACE_MARGIN_BYTES
    uploading = force or platform.agent_sha256 != package.sha256
    if uploading and platform.free_bytes is not None and platform.free_bytes < needed:
        raise BootstrapError(
            "no_disk_space",
            f"{label}: no disk space for the agent in {platform.cache_dir}: "
            f"{platform.free_bytes // 1024} KiB free, {needed // 1024} KiB needed",
        )


def _upload(conn: SshConnection, package: AgentPackage, directory: str, final_name: str) -> None:
    temp = f"{directory}/.{final_name}.{secrets.token_hex(6)}.tmp"
    final = f"{directory}/{final_name}"
    data = package.content()  # the bytes that were hashed: the remote runner checks that hash again
    sftp = conn.sftp()
    try:
        try:
            sftp.putfo(io.BytesIO(data), temp, file_size=len(data), confirm=True)
            sftp.chmod(temp, 0o600)
            try:
                sftp.posix_rename(temp, final)
            except OSError:  # server without posix-rename: remove then rename
                with contextlib.suppress(OSError):
                    sftp.remove(final)
                sftp.rename(temp, final)
        except (OSError, paramiko.SSHException, EOFError) as exc:
            with contextlib.suppress(OSError, paramiko.SSHException, EOFError):
                sftp.remove(temp)
            raise BootstrapError(
                "upload_failed", f"{conn.label}: uploading the agent to {final} failed: {exc}"
            ) from None
    finally:
        sftp.close()


def bootstrap(
    conn: SshConnection,
    package: AgentPackage,
    cache_dir: str = DEFAULT_CACHE_DIR,
    pythons: Sequence[str] = DEFAULT_PYTHONS,
    progress: Progress | None = None,
    force: bool = False,
) -> BootstrapResult:
    """Probe the server, upload the agent unless the same one is there (or `force`), return where it is."""
    package.check_protocol(conn.label)
    say = progress or (lambda message: None)
    say("probing python3 and the cache dir")
    try:
        ran = conn.run(probe_argv(cache_dir, package.remote_name, pythons), timeout=60, what="the bootstrap probe")
    except RemoteOutputTooLarge as exc:
        raise BootstrapError("probe_failed", str(exc)) from None
    except ConnectionLost as exc:
        raise BootstrapError("probe_failed", f"{conn.label}: the bootstrap probe failed: {exc}") from None
    platform = parse_probe(conn.label, ran.exit_status, ran.stdout, ran.stderr, pythons)
    check_platform(conn.label, platform, package, force)
    agent_path = f"{platform.cache_dir}/{package.remote_name}"
    if platform.agent_sha256 == package.sha256 and not force:
        log.debug("%s: agent %s already present", conn.label, package.sha256[:16])
        return BootstrapResult(platform, agent_path, uploaded=False)
    say(f"uploading the agent ({package.size // 1024} KiB)")
    _upload(conn, package, platform.cache_dir, package.remote_name)
    log.info("%s: uploaded agent %s to %s", conn.label, package.sha256[:16], agent_path)
    return BootstrapResult(platform, agent_path, uploaded=True)
