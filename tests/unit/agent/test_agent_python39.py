"""The agent runs on the servers' own Python, as old as 3.9: vermin proves no newer syntax or stdlib."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

AGENT = Path(__file__).resolve().parents[3] / "agent" / "meshdeck_agent"
VERMIN = Path(sys.executable).with_name("vermin")


def test_agent_code_passes_vermin_for_python_3_9():
    vermin = str(VERMIN) if VERMIN.exists() else shutil.which("vermin")
    if vermin is None:
        pytest.fail("vermin is not installed (it is in the project's test extra)")
    result = subprocess.run(
        [vermin, "-t=3.9-", "--no-tips", "--violations", "--eval-annotations", "--backport", "typing", str(AGENT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_agent_modules_compile_with_a_real_python_3_9_when_one_is_installed(tmp_path):
    candidates = [shutil.which("python3.9"), str(Path.home() / ".pyenv/versions/3.9.18/bin/python3.9")]
    python39 = next((c for c in candidates if c and Path(c).exists() and _runs(c)), None)
    if python39 is None:
        pytest.skip("no Python 3.9 interpreter on this machine (vermin above still checks the syntax)")
    result = subprocess.run(
        [
            python39,
            "-c",
            "import compileall, sys; sys.exit(0 if compileall.compile_dir(sys.argv[1], quiet=1, legacy=False, ddir='x', force=True, optimize=0) else 1)",
            str(AGENT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPYCACHEPREFIX": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _runs(python: str) -> bool:
    try:
        return (
            subprocess.run(
                [python, "-c", "import sys; assert sys.version_info[:2] == (3, 9)"], capture_output=True, timeout=30
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
