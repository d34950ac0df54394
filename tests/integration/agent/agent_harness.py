"""A real agent daemon for tests (in this process or as a subprocess) and a small NDJSON client for it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from meshdeck_agent.daemon import Daemon, DaemonConfig

AGENT_SRC = str(Path(__file__).resolve().parents[3] / "agent")


def short_dir() -> Path:
    """Socket paths must stay under 108 bytes; pytest's tmp_path can be longer."""
    return Path(tempfile.mkdtemp(prefix="mda-", dir="/tmp"))


def agent_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (AGENT_SRC, env.get("PYTHONPATH", "")) if p)
    return env


class Client:
    """Speaks the protocol over a connected stream socket; keeps events aside while waiting for replies."""

    def __init__(self, sock: socket.socket, hello: bool = True) -> None:
        self.sock = sock
        self.reader = sock.makefile("rb")
        self.events: list[dict[str, Any]] = []
        self._next_id = 0
        self.server_hello = self.read()
        if hello:
            self.send({"hello": {"protocol": 1, "agent": "test"}})

    @classmethod
    def connect(cls, path: str | Path, hello: bool = True, timeout: float = 30.0) -> Client:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(str(path))
        return cls(sock, hello)

    def send(self, obj: dict[str, Any]) -> None:
        self.sock.sendall((json.dumps(obj) + "\n").encode())

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self) -> dict[str, Any]:
        line = self.reader.readline()
        if not line:
            raise EOFError("agent closed the connection")
        return json.loads(line)

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """The reply (result or error object) to one request."""
        self._next_id += 1
        request_id = self._next_id
        self.send({"id": request_id, "method": method, "params": params or {}})
        while True:
            message = self.read()
            if "event" in message:
                self.events.append(message)
                continue
            if message.get("id") == request_id:
                return message

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        reply = self.request(method, params)
        assert "result" in reply, reply
        return reply["result"]

    def wait_event(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        for index, event in enumerate(self.events):
            if predicate(event):
                return self.events.pop(index)
        while time.monotonic() < deadline:
            message = self.read()
            if "event" not in message:
                continue
            if predicate(message):
                return message
            self.events.append(message)
        raise TimeoutError(f"no matching event within {timeout:.0f}s")

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


class InProcessAgent:
    """A Daemon serving in a thread of the test process."""

    def __init__(
        self, directory: Path, simulate: str | None = "8xH200", interval_s: float = 0.2, **kwargs: Any
    ) -> None:
        self.socket_path = directory / "agent.sock"
        self.config = DaemonConfig(
            socket_path=str(self.socket_path),
            state_dir=str(directory / "agent.state"),
            simulate=simulate,
            interval_s=interval_s,
            **kwargs,
        )
        self.daemon = Daemon(self.config)
        self.daemon.start()
        self.thread = threading.Thread(target=self.daemon.serve_forever, daemon=True)
        self.thread.start()

    def client(self, hello: bool = True) -> Client:
        return Client.connect(self.socket_path, hello)

    def stop(self, stop_workers: bool = True) -> None:
        """Shut the daemon down; with stop_workers, first end every worker a test left running."""
        if stop_workers:
            for worker in self.daemon.supervisor.list_workers():
                if worker["state"] in ("starting", "running", "restarting"):
                    self.daemon.supervisor.stop_worker(worker["id"], grace_s=2.0)
        self.daemon.request_shutdown()
        self.thread.join(timeout=15)


@contextmanager
def in_process_agent(
    simulate: str | None = "8xH200", interval_s: float = 0.2, **kwargs: Any
) -> Iterator[InProcessAgent]:
    directory = short_dir()
    agent = InProcessAgent(directory, simulate, interval_s, **kwargs)
    try:
        yield agent
    finally:
        agent.stop()
        shutil.rmtree(directory, ignore_errors=True)


def run_agent(*args: str, timeout: float = 60, input_bytes: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "meshdeck_agent", *args],
        input=input_bytes,
        capture_output=True,
        timeout=timeout,
        env=agent_env(),
    )


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


OLD_AGENT = Path(__file__).resolve().parents[2] / "fakes" / "old_agent.py"


@contextmanager
def old_agent(
    socket_path: Path, state_dir: Path, version: str = "0.0.9", protocol: int = 1
) -> Iterator[subprocess.Popen[bytes]]:
    """tests/fakes/old_agent.py serving `socket_path` (an agent of another version); killed afterwards if
    still running. Yields once its socket exists."""
    process = subprocess.Popen(
        [sys.executable, str(OLD_AGENT), str(socket_path), str(state_dir), version, str(protocol)]
    )
    try:
        if not wait_for(lambda: socket_path.exists() or process.poll() is not None, timeout=30):
            raise AssertionError(f"the fabricated old agent did not bind {socket_path}")
        if not socket_path.exists():
            raise AssertionError(f"the fabricated old agent exited with {process.returncode}")
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=20)
