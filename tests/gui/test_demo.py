"""`meshdeck --demo`: two real simulated 8×H200 agents, and nothing left running afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from meshdeck.cli import build_parser
from meshdeck.console_entry import run_gui
from meshdeck.services.demo import DEMO_HOSTS, DemoCluster


def _agent_processes(folder: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info.get("cmdline") or [])
        if "meshdeck_agent" in cmdline and str(folder) in cmdline:
            found.append(process)
    return found


@pytest.mark.slow
def test_demo_cluster_starts_two_simulated_agents_and_shuts_them_down() -> None:
    demo = DemoCluster.start(interval_s=0.5)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and any(demo.fleet.status(h).state != "connected" for h in DEMO_HOSTS):
            time.sleep(0.2)
        assert [demo.fleet.status(h).state for h in DEMO_HOSTS] == ["connected", "connected"]
        inventory = demo.fleet.call("demo-a", "inventory", timeout=30)
        assert inventory["simulated"] is True and len(inventory["gpus"]) == 8
        assert (demo.folder / "demo.sqlite").exists()
        assert _agent_processes(demo.folder)
    finally:
        demo.shutdown()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _agent_processes(demo.folder):
        time.sleep(0.2)
    assert not _agent_processes(demo.folder)
    assert not demo.folder.exists()


def test_screenshots_without_demo_and_a_bad_quit_after_are_refused(capsys) -> None:
    args = build_parser().parse_args(["--screenshots", "/tmp/x"])
    assert run_gui(args) == 2
    assert "--screenshots" in capsys.readouterr().err
    args = build_parser().parse_args(["--demo", "--quit-after", "-1"])
    assert run_gui(args) == 2
    assert "--quit-after" in capsys.readouterr().err
    assert build_parser().parse_args(["--window-size", "1280X800"]).window_size == (1280, 800)
    for bad in ("1280", "1280x", "x800", "100x100", "99999x800", "-1x800"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["--window-size", bad])
        assert "--window-size" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("platform", ["offscreen", "xcb"])
def test_demo_runs_its_tour_and_saves_one_png_per_view(tmp_path: Path, platform: str) -> None:
    """The whole demo: agents, plan, profile, pre-flight, simulated vLLM launch, real torch run, history;
    offscreen, and on a real X server (Xvfb) as a desktop would show it."""
    env = {**os.environ, "QT_QPA_PLATFORM": platform, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    shots = tmp_path / "shots"
    argv = [sys.executable, "-m", "meshdeck", "--log-level", "INFO", "--demo", "--screenshots", str(shots)]
    argv += ["--quit-after", "200"]
    if platform == "xcb":
        xvfb_run = shutil.which("xvfb-run")
        if xvfb_run is None:
            pytest.skip("xvfb-run is not installed (apt-get install xvfb xauth)")
        argv = [xvfb_run, "-a", "-s", "-screen 0 1600x1000x24", *argv]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    log = done.stderr
    for step in (
        "planning DeepSeek V3.2",
        "pre-flight of demo-deepseek-v3.2",
        "launching demo-tiny-deepseek",
        "demo: done",
    ):
        assert step in log, log[-3000:]
    assert "launch failed" not in log
    assert "max_num_seqs 256 instead of" in log  # the plan's FlashMLA mitigation, applied as the planner's save does
    names = sorted(p.name for p in shots.glob("*.png"))
    views = [f"{i + 1:02d}-{key}.png" for i, key in enumerate(_view_keys())]
    planner = next(name for name in views if name.endswith("-planner.png"))
    assert names == sorted([*views, planner.replace(".png", "-front.png")])  # + the throughput-interactivity chart
    assert all(p.stat().st_size > 10_000 for p in shots.glob("*.png"))


def _view_keys() -> list[str]:
    from meshdeck.ui.app import VIEW_KEYS

    return list(VIEW_KEYS)


def test_a_failed_vllm_launch_in_the_tour_starts_the_torch_run_once(qtbot, console_context) -> None:
    """When the demo's vLLM launch failed (its ports were taken), the tour went on to the torch run — and again
    when that run's own launch reported `launched`, because the vLLM step's handler stayed connected."""
    from meshdeck.ui.demo_tour import DemoTour
    from meshdeck.ui.main_window import MainWindow, ViewEntry
    from meshdeck.ui.views.deployments.view import DeploymentsView

    deployments = DeploymentsView(console_context)
    window = MainWindow(console_context, [ViewEntry("deployments", "Deployments", deployments)])
    qtbot.addWidget(window)
    tour = DemoTour(window, DEMO_HOSTS)
    torch_runs: list[int] = []
    tour._launch_torch = lambda: torch_runs.append(1)  # type: ignore[method-assign]

    def failing_launch() -> None:
        def work(_progress: object) -> None:
            raise RuntimeError("could not bind 127.0.0.1:29550: Address already in use")

        console_context.jobs.start("launch", work)

    deployments.launch = failing_launch  # type: ignore[method-assign]
    tour._launch_vllm()
    qtbot.waitUntil(lambda: torch_runs == [1], timeout=10000)
    deployments.launched.emit(object())  # the torch run's launch is up
    qtbot.wait(200)
    assert torch_runs == [1]
