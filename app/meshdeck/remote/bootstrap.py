"""Put the agent on a server: find python3 (>= 3.9) and the architecture, upload the zipapp if needed.

One exec runs a POSIX sh snippet that tries each python candidate, skips those older than 3.9, and
runs a small probe with the first good one. The probe reports the interpreter, `platform.machine()`,
the absolute cache dir (default `~/.cache/meshdeck`, created 0700), whether a file can be written
there, free bytes, and the SHA-256 of `agent-<hash>.pyz` if present. When that hash equals the local
zipapp's, nothing is uploaded (unless `force`: after an agent answered with another protocol, the app
uploads it again); otherwise SFTP writes `.agent-<hash>.pyz.<random>.tmp` and renames it into place, so
a reader never sees half a file. A local zipapp built for another protocol than this app speaks (a stale
dist/meshdeck-agent.pyz) is refused before anything is uploaded, naming both versions. Each failure is one `BootstrapError` line: no python3,
python too old (naming the version found), read-only home, not writable, no disk space, upload failed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import secrets
import sys
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko
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
import errno, hashlib, json, os, platform, sys
cache, agent = sys.argv[1], sys.argv[2]
out = {"python": sys.executable, "version": list(sys.version_info[:3]), "machine": platform.machine(),
       "system": platform.system(), "home": os.path.expanduser("~"), "error": None, "free_bytes": None,
       "agent_sha256": None}
cache = os.path.abspath(os.path.expanduser(cache))
out["cache_dir"] = cache
def fail(stage, exc):
    out["error"] = {"stage": stage, "errno": errno.errorcode.get(exc.errno or 0, str(exc.errno)),
                    "message": exc.strerror or str(exc), "path": getattr(exc, "filename", None) or cache}
try:
    os.makedirs(cache, mode=0o700, exist_ok=True)
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


@dataclass(frozen=True)
class AgentPackage:
    """The local zipapp to upload: its path, SHA-256 and size, and the agent version and protocol it
    carries (read from its meshdeck_agent sources; None when it has none, e.g. a test's stand-in)."""

    path: Path
    sha256: str
    size: int
    agent_version: str | None = None
    protocol: int | None = None

    @property
    def remote_name(self) -> str:
        return f"agent-{self.sha256[:16]}.pyz"

    @classmethod
    def from_path(cls, path: str | os.PathLike[str]) -> AgentPackage:
        path = Path(path)
        digest = hashlib.sha256()
        try:
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        except OSError as exc:
            raise AgentNotFound(f"agent zipapp {path}: {exc.strerror or exc}") from None
        version, protocol = _zipapp_versions(path)
        return cls(path, digest.hexdigest(), path.stat().st_size, version, protocol)

    def check_protocol(self, label: str) -> None:
        """Refuse a zipapp built for another protocol than this app speaks (BootstrapError "stale_agent")."""
        if self.protocol is not None and self.protocol != PROTOCOL_VERSION:
            raise BootstrapError(
                "stale_agent",
                f"{label}: the agent zipapp {self.path} is agent {self.agent_version or '?'} speaking protocol "
                f"{self.protocol}, but this meshdeck speaks protocol {PROTOCOL_VERSION}; rebuild it with "
                f"`make agent-pyz` (or point ${AGENT_PYZ_ENV} at a matching one)",
            )


def _zipapp_versions(path: Path) -> tuple[str | None, int | None]:
    """(agent version, protocol) from a zipapp's meshdeck_agent/__init__.py and handshake.py, read as text
    (older zipapps have PROTOCOL_VERSION in protocol.py)."""

    def text(archive: zipfile.ZipFile, *candidates: str) -> str:
        names = set(archive.namelist())
        return next((archive.read(name).decode() for name in candidates if name in names), "")

    try:
        with zipfile.ZipFile(path) as archive:
            init = text(archive, "meshdeck_agent/__init__.py")
            proto = text(archive, "meshdeck_agent/handshake.py", "meshdeck_agent/protocol.py")
    except (OSError, zipfile.BadZipFile, UnicodeDecodeError):
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
        built = agent_zipapp.cached_agent_zipapp()
    except (agent_zipapp.ZipappBuildError, OSError) as exc:
        reason = f"{exc.strerror}: {exc.filename}" if isinstance(exc, OSError) and exc.filename else str(exc)
        raise AgentNotFound(
            f"agent zipapp not found (looked at {looked}) and building one in {agent_zipapp.agent_cache_dir()} "
            f"failed: {reason}; set ${agent_zipapp.AGENT_CACHE_DIR_ENV} to a writable dir or ${AGENT_PYZ_ENV} to a zipapp"
        ) from None
    return AgentPackage.from_path(built)


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
    sftp = conn.sftp()
    try:
        try:
            sftp.put(str(package.path), temp, confirm=True)
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
