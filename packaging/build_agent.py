"""Build dist/meshdeck-agent.pyz: the agent as one file that runs on a server's own Python >= 3.9.

    python packaging/build_agent.py [--out dist/meshdeck-agent.pyz]

The archive holds `meshdeck_agent/` and, vendored at its root so `import pynvml` / `import
prometheus_client` resolve inside it, nvidia-ml-py's pynvml.py and the prometheus_client package
(without its Twisted/Django/aiohttp adapters, which the agent never imports), each from the versions
installed in this environment. Their licences go to LICENSES/ (nvidia-ml-py's BSD text is the header of
pynvml.py; prometheus_client's LICENSE and NOTICE come from its dist-info), with their versions listed
in LICENSES/VENDORED.txt. Entries are sorted and time-stamped 1980-01-01, so the same sources give the
same bytes. The server runs it as `python3 -I meshdeck-agent.pyz attach` (nothing else installed).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import io
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AGENT = ROOT / "agent" / "meshdeck_agent"
SKIP_PROMETHEUS = {"twisted", "django", "aiohttp"}
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
MAIN = b"import sys\nfrom meshdeck_agent.__main__ import main\nsys.exit(main())\n"


def _python_files(base: Path, skip_dirs: set[str] = frozenset()) -> list[Path]:
    files = []
    for path in sorted(base.rglob("*")):
        relative = path.relative_to(base)
        if "__pycache__" in relative.parts or any(part in skip_dirs for part in relative.parts[:1]):
            continue
        if path.is_file() and path.suffix in (".py", ".typed"):
            files.append(path)
    return files


def _pynvml_licence(source: str) -> str:
    """The BSD licence block at the top of pynvml.py."""
    lines = []
    for line in source.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").rstrip())
    return "\n".join(lines).strip() + "\n"


def collect() -> dict[str, bytes]:
    """archive name -> bytes."""
    entries: dict[str, bytes] = {"__main__.py": MAIN}
    for path in _python_files(AGENT):
        entries["meshdeck_agent/" + path.relative_to(AGENT).as_posix()] = path.read_bytes()
    pynvml_spec = importlib.util.find_spec("pynvml")
    if pynvml_spec is None or pynvml_spec.origin is None:
        raise SystemExit("nvidia-ml-py is not installed here; install the project's dependencies first")
    pynvml_source = Path(pynvml_spec.origin).read_bytes()
    entries["pynvml.py"] = pynvml_source
    entries["LICENSES/nvidia-ml-py/LICENSE.txt"] = _pynvml_licence(pynvml_source.decode("utf-8")).encode()
    prometheus_spec = importlib.util.find_spec("prometheus_client")
    if prometheus_spec is None or prometheus_spec.origin is None:
        raise SystemExit("prometheus_client is not installed here; install the project's dependencies first")
    prometheus_dir = Path(prometheus_spec.origin).parent
    for path in _python_files(prometheus_dir, SKIP_PROMETHEUS):
        entries["prometheus_client/" + path.relative_to(prometheus_dir).as_posix()] = path.read_bytes()
    distribution = importlib.metadata.distribution("prometheus_client")
    for file in distribution.files or ():
        if file.name in ("LICENSE", "NOTICE"):
            entries["LICENSES/prometheus_client/" + file.name] = Path(str(file.locate())).read_bytes()
    vendored = "nvidia-ml-py {} (BSD-3-Clause)\nprometheus_client {} (Apache-2.0)\n".format(
        importlib.metadata.version("nvidia-ml-py"),
        distribution.version,
    )
    entries["LICENSES/VENDORED.txt"] = vendored.encode()
    return entries


def build(out: Path) -> Path:
    entries = collect()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, entries[name])
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(b"#!/usr/bin/env python3\n" + buffer.getvalue())
    tmp.chmod(0o755)
    tmp.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "dist" / "meshdeck-agent.pyz"), help="where to write the .pyz")
    args = parser.parse_args(argv)
    path = build(Path(args.out))
    print(f"built {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
