"""Built-in torch workloads travel inside the command that runs them: their files, zlib + base64, in
one env value (`MESHDECK_WORKLOAD_BUNDLE`, its sha256 in `MESHDECK_WORKLOAD_SHA256`).

What a dry run lists as a command's staged files is read back out of that env value (`staged_files`),
never kept beside it: the files shown are the files sent, whatever put the bundle there.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

from meshdeck.core.errors import InputError

# workload name -> (entry module file, helper files shipped with it), all in meshdeck.workloads
BUILTIN_WORKLOADS: dict[str, tuple[str, tuple[str, ...]]] = {
    "collectives": ("collectives.py", ("layout_mesh.py",)),
    "tiny-deepseek": ("tiny_deepseek.py", ("layout_mesh.py", "tiny_deepseek_model.py")),
}
BUNDLE_ENV = "MESHDECK_WORKLOAD_BUNDLE"
BUNDLE_SHA_ENV = "MESHDECK_WORKLOAD_SHA256"
MAX_BUNDLE_BYTES = 16 * 1024 * 1024  # unpacked; the built-in workloads are ~60 KB


@dataclass(frozen=True)
class StagedFile:
    """A file the command needs on its node, shipped inline with the command."""

    name: str
    sha256: str
    size: int


@dataclass(frozen=True)
class WorkloadBundle:
    entry: str
    files: Mapping[str, str]  # file name -> source text
    blob: str  # base64(zlib(json(files)))
    sha256: str

    @property
    def env(self) -> dict[str, str]:
        return {BUNDLE_ENV: self.blob, BUNDLE_SHA_ENV: self.sha256}


def workload_bundle(name: str) -> WorkloadBundle:
    """The files of a built-in workload, read from this installation of meshdeck."""
    if name not in BUILTIN_WORKLOADS:
        raise InputError("torch.script", f"{name!r} is not a built-in workload ({', '.join(BUILTIN_WORKLOADS)})")
    entry, helpers = BUILTIN_WORKLOADS[name]
    package = resources.files("meshdeck.workloads")
    files = {file: (package / file).read_text(encoding="utf-8") for file in (entry, *helpers)}
    blob = base64.b64encode(zlib.compress(json.dumps(files, sort_keys=True).encode("utf-8"), 9)).decode("ascii")
    return WorkloadBundle(entry, files, blob, hashlib.sha256(blob.encode("ascii")).hexdigest())


def bundle_files(blob: str) -> dict[str, str]:
    """The files inside a bundle env value (what the stager on the server will write)."""
    try:
        packed = base64.b64decode(blob.encode("ascii"), validate=True)
        unpacker = zlib.decompressobj()
        text = unpacker.decompress(packed, MAX_BUNDLE_BYTES + 1)
        if len(text) > MAX_BUNDLE_BYTES or unpacker.unconsumed_tail:
            raise ValueError(f"unpacks to more than {MAX_BUNDLE_BYTES} bytes")
        files = json.loads(text.decode("utf-8"))
    except (UnicodeError, binascii.Error, zlib.error, ValueError) as exc:
        raise InputError(f"env.{BUNDLE_ENV}", f"not a workload bundle ({exc})") from None
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise InputError(f"env.{BUNDLE_ENV}", "not a workload bundle (not a mapping of file names to text)")
    return files


def staged_files(env: Mapping[str, str]) -> tuple[StagedFile, ...]:
    """The files a command's env ships inline (none without a bundle), by name."""
    blob = env.get(BUNDLE_ENV)
    if blob is None:
        return ()
    return tuple(
        StagedFile(name, hashlib.sha256(text.encode()).hexdigest(), len(text.encode()))
        for name, text in sorted(bundle_files(blob).items())
    )


def describe_bundle(env: Mapping[str, str]) -> str:
    """How a bundle env value is shown and kept: its files by name, digest and size, not ~10 KB of base64."""
    files = ", ".join(f"{f.name} sha256:{f.sha256[:16]} {f.size} B" for f in staged_files(env))
    return f"<inline workload: {files}>"
