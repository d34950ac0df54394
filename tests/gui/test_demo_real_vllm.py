"""`meshdeck --demo --real-vllm`: the demo adds two real (unsimulated) agents for vLLM's CPU build, and says
how to install it when it is missing; `--real-vllm` alone is refused."""

from __future__ import annotations

import time

import pytest
from meshdeck.cli import build_parser
from meshdeck.console_entry import run_gui
from meshdeck.services.demo import DEMO_HOSTS, REAL_VLLM_HOSTS, DemoCluster, demo_real_vllm_profile


def test_real_vllm_without_demo_or_without_the_venv_is_refused(capsys, monkeypatch, tmp_path) -> None:
    assert run_gui(build_parser().parse_args(["--real-vllm"])) == 2
    assert "--real-vllm: only with --demo" in capsys.readouterr().err
    monkeypatch.setenv("MESHDECK_VLLM", str(tmp_path / "none"))
    assert run_gui(build_parser().parse_args(["--demo", "--real-vllm", "--quit-after", "5"])) == 2
    assert "make vllm-venv" in capsys.readouterr().err


@pytest.mark.slow
def test_the_demo_runs_real_agents_for_the_real_engine_and_shuts_them_down(tmp_path) -> None:
    demo = DemoCluster.start(interval_s=0.5, real_vllm="/opt/vllm/bin/vllm")
    try:
        hosts = (*DEMO_HOSTS, *REAL_VLLM_HOSTS)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and any(demo.fleet.status(h).state != "connected" for h in hosts):
            time.sleep(0.2)
        assert [demo.fleet.status(h).state for h in hosts] == ["connected"] * 4
        assert demo.fleet.call("demo-a", "inventory", timeout=30)["simulated"] is True
        assert demo.fleet.call("cpu-a", "inventory", timeout=30)["simulated"] is False
        profile = demo_real_vllm_profile(demo.real_vllm, demo.real_hosts)
        assert profile.hosts == list(REAL_VLLM_HOSTS) and profile.vllm.executable == "/opt/vllm/bin/vllm"
        assert profile.layout.tensor_parallel == 2 and "VLLM_CPU_KVCACHE_SPACE" not in profile.env
        assert profile.vllm.extra_args[-2:] == ["--kv-cache-memory-bytes", "32M"]
    finally:
        demo.shutdown()
    assert not demo.folder.exists()
