"""Packaging: the PyInstaller spec, its entry point, the .desktop file and the icons.

The one-folder build itself is slow (minutes) and runs only when asked: MESHDECK_BUILD_APP=1
(`make app-bundle` sets it) builds it into a temporary folder and starts it (`--version`, a plan,
and the demo offscreen)."""

from __future__ import annotations

import ast
import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtGui import QImage

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "packaging" / "meshdeck.spec"
ENTRY = REPO / "packaging" / "meshdeck_main.py"
DESKTOP = REPO / "packaging" / "meshdeck.desktop"


def _string_constants(tree: ast.AST) -> set[str]:
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def test_spec_is_python_and_names_files_that_exist() -> None:
    tree = ast.parse(SPEC.read_text(), filename=str(SPEC))
    calls = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert {"Analysis", "PYZ", "EXE", "COLLECT"} <= calls  # a one-folder build: EXE + COLLECT
    strings = _string_constants(tree)
    assert "torch" in strings  # kept out: the workloads run on the servers' own Python
    text = SPEC.read_text()
    for relative in (
        "packaging/meshdeck_main.py",
        "packaging/build_agent.py",
        "packaging/meshdeck.desktop",
        "resources/gpus.json",
        "resources/speed-tables.json",
        "resources/models",
        "resources/icons/meshdeck-256.png",
        "resources/qss",
        "app/meshdeck/workloads",
    ):
        assert f'"{relative.rsplit("/", 1)[-1]}"' in text, f"the spec does not name {relative}"
        assert (REPO / relative).exists(), relative


def test_entry_point_runs_the_cli_and_the_agent() -> None:
    version = subprocess.run([sys.executable, str(ENTRY), "--version"], capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and version.stdout.startswith("meshdeck ")
    agent = subprocess.run(
        [sys.executable, str(ENTRY), "-I", "-m", "meshdeck_agent", "version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert agent.returncode == 0, agent.stderr
    assert agent.stdout.strip()


def test_desktop_entry_has_the_keys_a_launcher_needs() -> None:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # keys are case-sensitive
    parser.read_string(DESKTOP.read_text())
    entry = parser["Desktop Entry"]
    assert entry["Type"] == "Application"
    assert entry["Exec"].split()[0] == "meshdeck" and entry["Icon"] == "meshdeck"
    assert entry["Categories"].endswith(";")
    validator = shutil.which("desktop-file-validate")
    if validator:
        done = subprocess.run([validator, str(DESKTOP)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr


def test_icons_exist_in_every_size_and_are_square(qapp) -> None:
    for size in (16, 32, 48, 64, 128, 256):
        image = QImage(str(REPO / "resources" / "icons" / f"meshdeck-{size}.png"))
        assert not image.isNull() and image.width() == image.height() == size
    assert (REPO / "resources" / "icons" / "meshdeck.svg").read_text().startswith("<svg")


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(os.environ.get("MESHDECK_BUILD_APP") != "1", reason="set MESHDECK_BUILD_APP=1 to build the app")
def test_the_one_folder_app_builds_and_starts(tmp_path: Path) -> None:
    pyinstaller = Path(sys.executable).with_name("pyinstaller")
    dist, work = tmp_path / "dist", tmp_path / "work"
    subprocess.run(
        [str(pyinstaller), "--noconfirm", "--distpath", str(dist), "--workpath", str(work), str(SPEC)],
        check=True,
        capture_output=True,
        timeout=1500,
    )
    app = dist / "meshdeck" / "meshdeck"
    assert subprocess.run([str(app), "--version"], capture_output=True, text=True, timeout=60).stdout.startswith(
        "meshdeck"
    )
    plan = subprocess.run(
        [str(app), "plan", "--model", "deepseek-v3.2", "--gpu", "H200-SXM-141GB", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert plan.returncode == 0 and '"layouts"' in plan.stdout
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "XDG_CONFIG_HOME": str(tmp_path / "config")}
    shots = tmp_path / "shots"
    demo = subprocess.run(
        [str(app), "--demo", "--screenshots", str(shots), "--quit-after", "150"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert len(list(shots.glob("*.png"))) == 7
