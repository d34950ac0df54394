"""Build the agent zipapp (meshdeck-agent.pyz) from the installed sources, and keep one in the user cache.

The app uploads this one file to every server, where it runs on the server's own Python >= 3.9 as
`python3 -I meshdeck-agent.pyz attach` with nothing else installed. Building it here (rather than only
in `make agent-pyz`) means a clone or a pip-installed wheel can reach real hosts on the first try:
`cached_agent_zipapp()` builds it once into the user cache dir, named by `agent_source_digest()`, and
reuses it until the agent's sources or the vendored dependencies change.

The archive holds `meshdeck_agent/` (found with `importlib.util.find_spec`, so an editable checkout and
a wheel install both work) and, vendored at its root so `import pynvml` / `import prometheus_client`
resolve inside it, nvidia-ml-py's pynvml.py and the prometheus_client package (without its
Twisted/Django/aiohttp adapters, which the agent never imports), each from the versions installed in
this environment. Their licences go to LICENSES/ (nvidia-ml-py's BSD text is the header of pynvml.py;
prometheus_client's LICENSE and NOTICE come from its dist-info), with their versions listed in
LICENSES/VENDORED.txt. Entries are sorted and time-stamped 1980-01-01, so the same sources give the
same bytes. Every write is atomic (a temp file in the target dir, then `os.replace`), so two processes
building into one cache at once both end with a whole file.

The cache is trusted only as far as it is checked: the cache dir must be a directory of this user that no
one else can write (`private_cache_dir`: made 0700; one owned by another user, writable by others or a
symbolic link is refused, naming it and what to do), and a cached file is used only when its bytes are the
build of the current sources (`current_build`, made in memory once per process and compared by SHA-256);
any other file under that name is rebuilt over, with a warning. A file someone else planted there is
therefore never uploaded to a server.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import io
import logging
import os
import stat
import tempfile
import threading
import zipfile
from pathlib import Path

import platformdirs

log = logging.getLogger(__name__)

AGENT_CACHE_DIR_ENV = "MESHDECK_AGENT_CACHE_DIR"
CACHED_PREFIX = "meshdeck-agent-"
SKIP_PROMETHEUS = frozenset({"twisted", "django", "aiohttp"})
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
SHEBANG = b"#!/usr/bin/env python3\n"
MAIN = b"import sys\nfrom meshdeck_agent.__main__ import main\nsys.exit(main())\n"
# Part of the digest: bump when the archive's layout changes without any source changing.
ARCHIVE_FORMAT = 1
KEEP_OLD_BUILDS = 3  # older cached builds kept besides the current one (another meshdeck may use them)

_cache_lock = threading.Lock()  # one build per process even when every host thread connects at once


class ZipappBuildError(Exception):
    """The zipapp cannot be built here (a source or vendored dependency is missing); says which."""


class UnsafeCacheDir(ZipappBuildError):
    """The cache dir is not this user's alone (another owner, writable by others, a symbolic link)."""


def agent_source_dir() -> Path:
    """The directory of the `meshdeck_agent` package this environment imports."""
    spec = importlib.util.find_spec("meshdeck_agent")
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    if not locations:
        raise ZipappBuildError("the meshdeck_agent package is not installed in this environment")
    return Path(locations[0])


def _python_files(base: Path, skip_dirs: frozenset[str] = frozenset()) -> list[Path]:
    files = []
    for path in sorted(base.rglob("*")):
        relative = path.relative_to(base)
        if "__pycache__" in relative.parts or any(part in skip_dirs for part in relative.parts[:1]):
            continue
        if path.is_file() and path.suffix in (".py", ".typed"):
            files.append(path)
    return files


def _module_origin(module: str, distribution: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ZipappBuildError(f"{distribution} is not installed here; install the project's dependencies first")
    return Path(spec.origin)


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise ZipappBuildError(
            f"{distribution} is not installed here; install the project's dependencies first"
        ) from None


def _pynvml_licence(source: str) -> str:
    """The BSD licence block at the top of pynvml.py."""
    lines = []
    for line in source.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").rstrip())
    return "\n".join(lines).strip() + "\n"


def collect_entries() -> dict[str, bytes]:
    """archive name -> bytes, for everything the zipapp holds."""
    agent = agent_source_dir()
    entries: dict[str, bytes] = {"__main__.py": MAIN}
    for path in _python_files(agent):
        entries["meshdeck_agent/" + path.relative_to(agent).as_posix()] = path.read_bytes()
    pynvml_source = _module_origin("pynvml", "nvidia-ml-py").read_bytes()
    entries["pynvml.py"] = pynvml_source
    entries["LICENSES/nvidia-ml-py/LICENSE.txt"] = _pynvml_licence(pynvml_source.decode("utf-8")).encode()
    prometheus_dir = _module_origin("prometheus_client", "prometheus_client").parent
    for path in _python_files(prometheus_dir, SKIP_PROMETHEUS):
        entries["prometheus_client/" + path.relative_to(prometheus_dir).as_posix()] = path.read_bytes()
    distribution = importlib.metadata.distribution("prometheus_client")
    for file in distribution.files or ():
        if file.name in ("LICENSE", "NOTICE"):
            entries["LICENSES/prometheus_client/" + file.name] = Path(str(file.locate())).read_bytes()
    vendored = "nvidia-ml-py {} (BSD-3-Clause)\nprometheus_client {} (Apache-2.0)\n".format(
        _version("nvidia-ml-py"),
        distribution.version,
    )
    entries["LICENSES/VENDORED.txt"] = vendored.encode()
    return entries


def zipapp_bytes(entries: dict[str, bytes]) -> bytes:
    """The executable archive: a shebang line, then a deflated zip with sorted, 1980-stamped entries."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, entries[name])
    return SHEBANG + buffer.getvalue()


def _write_atomically(out: Path, data: bytes) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    temp = Path(temp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        temp.chmod(0o755)
        os.replace(temp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise


def build_agent_zipapp(out: Path) -> Path:
    """Write the zipapp to `out` (atomically, mode 0755) and return `out`."""
    _write_atomically(out, zipapp_bytes(collect_entries()))
    return out


def agent_source_digest() -> str:
    """SHA-256 (hex) naming what a build would hold: the agent's source files (names and bytes), the
    vendored dependencies' versions and the archive format. Reads the sources only; builds nothing."""
    agent = agent_source_dir()
    digest = hashlib.sha256(f"meshdeck-agent-zipapp {ARCHIVE_FORMAT}\n".encode())
    for path in _python_files(agent):
        digest.update(path.relative_to(agent).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    for distribution in ("nvidia-ml-py", "prometheus_client"):
        digest.update(f"{distribution}=={_version(distribution)}\n".encode())
    return digest.hexdigest()


def agent_cache_dir() -> Path:
    """Where built zipapps are kept: $MESHDECK_AGENT_CACHE_DIR, else the user cache dir of meshdeck."""
    configured = os.environ.get(AGENT_CACHE_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    return platformdirs.user_cache_path("meshdeck", appauthor=False)


def private_cache_dir(directory: Path) -> Path:
    """`directory`, created 0700 if missing; raises UnsafeCacheDir for one this user does not hold alone.

    A directory of this user that others may only read (an older meshdeck made it 0755) is made 0700; one
    owned by another user, writable by group or others, or a symbolic link is refused: whoever else can
    write there could plant the zipapp that is uploaded to every server."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = directory.lstat()
    what_to_do = f"set ${AGENT_CACHE_DIR_ENV} to a directory of your own (it is made 0700)"
    if stat.S_ISLNK(info.st_mode):
        raise UnsafeCacheDir(f"the agent cache dir {directory} is a symbolic link; {what_to_do}")
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeCacheDir(f"the agent cache dir {directory} is not a directory; {what_to_do}")
    if info.st_uid != os.geteuid():
        raise UnsafeCacheDir(
            f"the agent cache dir {directory} belongs to uid {info.st_uid}, not to you (uid {os.geteuid()}); "
            f"{what_to_do}"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022:
        raise UnsafeCacheDir(
            f"the agent cache dir {directory} is writable by others (mode {mode:04o}); empty it and "
            f"`chmod 700` it, or {what_to_do}"
        )
    if mode != 0o700:
        directory.chmod(0o700)
        log.info("made the agent cache dir %s private (mode %04o -> 0700)", directory, mode)
    return directory


_builds: dict[str, tuple[bytes, str]] = {}  # source digest -> (archive bytes, their SHA-256), this process's


def current_build(digest: str | None = None) -> tuple[bytes, str]:
    """The zipapp of the current sources (whose agent_source_digest is `digest`, computed when not given) and
    its SHA-256, built in memory once per process and digest."""
    digest = digest or agent_source_digest()
    with _cache_lock:
        if digest not in _builds:
            data = zipapp_bytes(collect_entries())
            _builds.clear()
            _builds[digest] = (data, hashlib.sha256(data).hexdigest())
        return _builds[digest]


def _file_sha256(path: Path) -> str | None:
    """SHA-256 of a regular file of this user that no one else can write, read without following a link;
    None for anything else (missing, a link, another owner's, group- or world-writable)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            return None
        digest = hashlib.sha256()
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cached_agent_zipapp(cache_dir: Path | None = None) -> Path:
    """The zipapp for the current sources in the cache dir (see cached_agent_build)."""
    return cached_agent_build(cache_dir)[0]


def cached_agent_build(cache_dir: Path | None = None) -> tuple[Path, str]:
    """The zipapp for the current sources in the cache dir and the SHA-256 its bytes have, written there
    first unless a file with exactly those bytes is there already (a different file under its name is
    replaced, and the warning names it).

    Raises ZipappBuildError (something to build from is missing; UnsafeCacheDir: the cache dir is not
    this user's alone) or OSError (the cache dir cannot be written).
    """
    digest = agent_source_digest()
    data, sha256 = current_build(digest)  # first: a build that cannot be made leaves no cache dir behind
    directory = private_cache_dir(cache_dir if cache_dir is not None else agent_cache_dir())
    with _cache_lock:
        path = directory / f"{CACHED_PREFIX}{digest[:16]}.pyz"
        found = _file_sha256(path)
        if found == sha256:
            return path, sha256
        if found is not None or os.path.lexists(path):
            log.warning(
                "the cached agent zipapp %s is not this meshdeck's build of it (SHA-256 %s, expected %s); replacing it",
                path,
                (found or "unreadable, or not a file of yours alone")[:64],
                sha256,
            )
        _write_atomically(path, data)
        log.info("built the agent zipapp %s (%d bytes) for this meshdeck's agent sources", path, len(data))
        _prune_old_builds(directory, keep=path)
        return path, sha256


def _prune_old_builds(directory: Path, keep: Path) -> None:
    """Remove cached builds beyond the newest KEEP_OLD_BUILDS (by mtime) other than `keep`."""
    others = []
    for candidate in directory.glob(f"{CACHED_PREFIX}*.pyz"):
        if candidate != keep:
            with contextlib.suppress(OSError):
                others.append((candidate.stat().st_mtime, candidate))
    others.sort(reverse=True)
    for _, stale in others[KEEP_OLD_BUILDS:]:
        with contextlib.suppress(OSError):
            stale.unlink()
            log.debug("removed the old agent zipapp %s", stale)
