"""Agents scripted for pre-flight tests: each `call` replies in the agents' own shapes
(agent/meshdeck_agent/checks.py, daemon.py), with ports taken, hosts unreachable or inventories chosen by
the test, and every call recorded."""

from __future__ import annotations

import time
from typing import Any

from meshdeck.services.preflight import PORT_PROBE

FILES = {"exists": True, "files": [["config.json", 1639], ["model-00001-of-000163.safetensors", 5234139343]],
         "total_bytes": 5234140982, "truncated": False}  # fmt: skip


class ScriptedAgents:
    """Replies in the agents' shapes (agent/meshdeck_agent/checks.py, daemon.py)."""

    def __init__(
        self, taken: set[int] | None = None, unreachable: set[str] | None = None, inventories: dict | None = None
    ) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.inventories = inventories or {}
        self.taken = taken or set()
        self.unreachable = unreachable or set()
        self.probe_running = False

    def call(self, host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        params = params or {}
        self.calls.append((host, method, params))
        if method == "checks.files":
            return FILES
        if method == "checks.versions":
            return {
                "python": "3.11.7",
                "torch": "2.9.0",
                "vllm": "0.33.0",
                "nccl": "2.27.3",
                "ray": None,
                "error": None,
            }
        if method == "inventory":
            default = {"gpus": [{"index": i, "memory_total_bytes": 150 * 10**9} for i in range(8)], "nics": []}
            return self.inventories.get(host, default)
        if method == "samples.read":
            gpus = [{"index": i, "memory_used_bytes": 10**9} for i in range(8)]
            return {"samples": [{"seq": 9, "gpus": gpus}], "dropped": 0, "first_seq": 1, "last_seq": 9}
        if method == "checks.ports_free":
            return {"ports": {str(p): p not in self.taken for p in params["ports"]}}
        if method == "workers.start":
            assert params["spec"]["argv"][1:3] == ["-c", PORT_PROBE]
            self.probe_running = True
            return {"id": params["spec"]["id"], "state": "running"}
        if method == "workers.logs":
            return {"data": "listening 8000\nlistening 29501\nprobe ready\n", "offset": 40}
        if method == "checks.tcp_connect":
            assert self.probe_running, "probed before the listener was up"
            if host in self.unreachable:
                return {"ok": False, "error": f"{params['host']}:{params['port']}: timed out", "rtt_ms": None}
            return {"ok": True, "error": None, "rtt_ms": 0.3}
        if method == "workers.stop":
            self.probe_running = False
            return {"id": params["id"], "state": "stopped"}
        if method == "agent.time":
            return {"time": time.time()}
        raise AssertionError(method)
