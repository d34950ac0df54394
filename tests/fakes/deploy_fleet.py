"""Scripted fleets for launch and deployment tests: `FakeFleet` answers workers.* and checks.* like an
agent, records calls, and delivers `worker` / `log` events the way the fleet does (from another thread);
`InventoryFleet` answers only what preparing a launch asks (inventory, checks.route, checks.versions).
Both report vLLM 0.33.0 (the newest release the planner models) from `checks.versions` unless told otherwise.

`workers.logs` answers as the agent's `workers.logs.read_log` does: at most `limit` characters (256 Ki by
default, 512 Ki at most) from `offset`, or the last `limit` when no offset is given (the tail)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from meshdeck.remote.events import AgentEvent
from meshdeck.services.deployments.model import RecordedDeployment

LOG_DEFAULT_LIMIT = 256 * 1024  # as meshdeck_agent.workers.logs
LOG_MAX_LIMIT = 512 * 1024


def _versions_answer(versions: dict[str, Any], host: str) -> Any:
    answer = versions.get(
        host, {"python": "3.11.7", "torch": "2.13.0", "vllm": "0.33.0", "nccl": "2.27.3", "ray": None}
    )
    if isinstance(answer, Exception):
        raise answer
    return answer


class FakeFleet:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.workers: dict[tuple[str, str], dict[str, Any]] = {}
        self.logs: dict[str, str] = {}
        self.open_ports: set[tuple[str, int]] = set()
        self.on_start: dict[str, Callable[[str, dict[str, Any]], None]] = {}  # command suffix -> behaviour
        self.fail_start: set[str] = set()
        self.routes: dict[str, Any] = {}  # host -> its checks.route answer, or an exception to raise
        self.versions: dict[str, Any] = {}  # host -> its checks.versions answer, or an exception to raise
        self._subscribers: list[Callable[[Any], None]] = []
        self._lock = threading.Lock()

    # the Fleet protocol
    def subscribe(self, callback: Callable[[Any], None]) -> Callable[[], None]:
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    def call(self, host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        params = params or {}
        with self._lock:
            self.calls.append((host, method, params))
        if method == "workers.start":
            spec = params["spec"]
            command = spec["id"].rsplit(".", 1)[1]
            if command in self.fail_start:
                raise RuntimeError(f"{host}: spawn failed")
            worker = {"id": spec["id"], "name": spec["name"], "state": "running", "pid": 100, "exit_code": None,
                      "signal": None, "restarts": 0, "reason": "", "spec": spec}  # fmt: skip
            self.workers[(host, spec["id"])] = worker
            self.logs.setdefault(spec["id"], "")
            self.emit_worker(host, worker)  # the agent announces every worker that starts running
            behaviour = self.on_start.get(command)
            if behaviour:
                threading.Thread(target=behaviour, args=(host, worker), daemon=True).start()
            return {k: v for k, v in worker.items() if k != "spec"}
        if method == "workers.stop":
            worker = self.workers[(host, params["id"])]
            if worker["state"] in ("running", "starting", "restarting"):
                worker.update(state="stopped", reason="stopped by request")
                self.emit_worker(host, worker)
            return {k: v for k, v in worker.items() if k != "spec"}
        if method == "workers.logs":
            text = self.logs.get(params["id"], "")
            limit = max(1, min(LOG_MAX_LIMIT, params.get("limit") or LOG_DEFAULT_LIMIT))
            start = max(0, len(text) - limit) if params.get("offset") is None else min(params["offset"], len(text))
            data = text[start : start + limit]
            return {"data": data, "offset": start + len(data), "size": len(text), "start": start}
        if method == "workers.list":
            return {
                "workers": [
                    {k: v for k, v in w.items() if k != "spec"} for (h, _), w in self.workers.items() if h == host
                ]
            }
        if method == "checks.route":
            answer = self.routes[host]
            if isinstance(answer, Exception):
                raise answer
            return answer
        if method == "checks.versions":
            return _versions_answer(self.versions, host)
        if method == "checks.tcp_connect":
            return {"ok": (host, params["port"]) in self.open_ports, "error": None, "rtt_ms": 0.1}
        raise AssertionError(f"unexpected call {method}")

    # scripting
    def emit_worker(self, host: str, worker: dict[str, Any]) -> None:
        data = {k: v for k, v in worker.items() if k not in ("spec",)}
        for callback in list(self._subscribers):
            callback(AgentEvent(host, "worker", data))

    def emit_log(self, host: str, worker_id: str, kind: str, fields: dict[str, Any]) -> None:
        for callback in list(self._subscribers):
            callback(AgentEvent(host, "log", {"worker": worker_id, "kind": kind, "fields": fields}))

    def crash(self, host: str, worker_id: str, *, signal: int | None = 9, exit_code: int | None = None) -> None:
        worker = self.workers[(host, worker_id)]
        worker.update(state="failed", signal=signal, exit_code=exit_code, reason="")
        self.emit_worker(host, worker)

    def finish(self, host: str, worker_id: str) -> None:
        worker = self.workers[(host, worker_id)]
        worker.update(state="exited", exit_code=0, reason="exited with code 0")
        self.emit_worker(host, worker)

    def started(self) -> list[tuple[str, str]]:
        return [(h, p["spec"]["id"].rsplit(".", 1)[1]) for h, m, p in self.calls if m == "workers.start"]

    def stopped(self) -> list[tuple[str, str]]:
        return [(h, p["id"].rsplit(".", 1)[1]) for h, m, p in self.calls if m == "workers.stop"]


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


class Recorder:
    """A DeploymentRecorder that keeps everything."""

    def __init__(self) -> None:
        self.started: list[Any] = []
        self.events: list[tuple[str, str, str]] = []
        self.finished: list[Any] = []
        self.measured: list[tuple[str, str, dict[str, Any]]] = []
        self.states: list[str] = []

    def deployment_started(self, snapshot: Any, plan: Any) -> None:
        self.started.append((snapshot, plan))

    def deployment_event(self, deployment_id: str, kind: str, message: str, data: Any, state: str, reason: str) -> None:
        self.events.append((deployment_id, kind, message))
        self.states.append(state)

    def deployment_finished(self, snapshot: Any) -> None:
        self.finished.append(snapshot)

    def startup_measured(self, deployment_id: str, worker: str, measured: Any) -> None:
        self.measured.append((deployment_id, worker, dict(measured)))

    def recorded(self, deployment_id: str) -> RecordedDeployment | None:
        """What a store would say: a record for every launch it heard of, open until it finished."""
        started = [snapshot for snapshot, _plan in self.started if snapshot.id == deployment_id]
        if not started:
            return None
        finished = any(snapshot.id == deployment_id for snapshot in self.finished)
        return RecordedDeployment(started[0].name, started[0].engine, started[0].started_at, open=not finished)


class InventoryFleet:
    """Answers `inventory` per host and `checks.route`; anything else (starting a worker) fails the test."""

    def __init__(self, inventories: dict[str, Any], versions: dict[str, Any] | None = None) -> None:
        self.inventories = inventories
        self.versions = versions or {}  # host -> its checks.versions answer, or an exception to raise
        self.calls: list[tuple[str, str]] = []

    def call(self, host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        self.calls.append((host, method))
        if method == "inventory":
            return self.inventories[host]
        if method == "checks.route":
            return {"host": "10.0.0.1", "address": "10.0.0.1", "source": "10.0.0.2", "interface": "eth0", "error": None}
        if method == "checks.versions":
            return _versions_answer(self.versions, host)
        raise AssertionError(f"unexpected call {method} to {host}")

    def __enter__(self) -> InventoryFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        return None
