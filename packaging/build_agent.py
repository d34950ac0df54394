"""Build dist/meshdeck-agent.pyz: the agent as one file that runs on a server's own Python >= 3.9.

    python packaging/build_agent.py [--out dist/meshdeck-agent.pyz]

A command line over meshdeck.remote.agent_zipapp (which says what the archive holds: meshdeck_agent,
vendored pynvml and prometheus_client with their licences, sorted entries stamped 1980-01-01, so the
same sources give the same bytes). meshdeck builds the same file on demand into its user cache dir, so
this step is optional; the PyInstaller spec uses it to put the zipapp in the bundle. This checkout's
app/ and agent/ come first on sys.path, so it always builds the agent of the tree it lives in.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "app"), str(ROOT / "agent")]

from meshdeck.remote.agent_zipapp import ZipappBuildError, build_agent_zipapp  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "dist" / "meshdeck-agent.pyz"), help="where to write the .pyz")
    args = parser.parse_args(argv)
    try:
        path = build_agent_zipapp(Path(args.out))
    except ZipappBuildError as exc:
        raise SystemExit(str(exc)) from None
    print(f"built {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
