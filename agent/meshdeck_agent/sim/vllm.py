"""The simulated vLLM stand-in a `--simulate` agent runs in place of `vllm serve` (never silently: only
on a simulated agent, which says so in every inventory and sample, and its first log line says so).

    meshdeck-agent simvllm --simulate-json <simulate.json> -- vllm serve MODEL --port 8000 -tp 8 ...

The agent chose it from the worker's own argv (engine.py) and wrote the numbers vLLM would measure
into simulate.json (memory.py). The stand-in reads the same argv a real vLLM gets, then
1. opens what a real head opens before loading (the torch.distributed master port of a multi-node
   replica, the data-parallel RPC port of a DP head), so the launcher's ready checks are the real ones;
2. prints vLLM's startup lines in vLLM's format with those numbers (weights, KV memory, KV tokens,
   max concurrency per engine), pausing as a real start would;
3. fails like vLLM when they do not fit: torch's CUDA OOM while loading weights that exceed the
   simulated GPUs' free memory (the agent passes MESHDECK_SIM_GPU_FREE_BYTES), "No available memory
   for the cache blocks" when nothing is left for the KV cache, or the max-seq-len error when one
   request of max_model_len does not fit;
4. serves /metrics (vLLM's metric names, one `engine` per DP rank, synthetic load from load.py),
   /health and /v1/models on --port until SIGTERM. Every HTTP reply carries `X-Meshdeck-Simulated: 1`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .engine import parse_vllm_serve
from .load import EngineLoad, ExportedMetrics
from .spec import CONTEXT_BYTES, startup_phases

GIB = float(1 << 30)


def _stamp() -> str:
    return time.strftime("%m-%d %H:%M:%S")


def _say(process: str, source: str, message: str, level: str = "INFO") -> None:
    sys.stdout.write("(%s pid=%d) %s %s [%s] %s\n" % (process, os.getpid(), level, _stamp(), source, message))
    sys.stdout.flush()


class StandIn:
    def __init__(self, simulate: Dict[str, Any], argv: List[str]) -> None:
        self.simulate = simulate
        self.args = parse_vllm_serve(argv)
        self.model = self.args.model
        self.served_name = self.args.served_model_name
        self.port: Optional[int] = self.args.port
        self.host = self.args.host or "127.0.0.1"
        local = simulate["data_parallel_local"]
        start = simulate["data_parallel_start_rank"]
        self.engines = [str(start + e) for e in range(local)]
        self._stop = threading.Event()
        self.server: Optional[ThreadingHTTPServer] = None
        self._early: List[socket.socket] = []

    def startup(self) -> int:
        """Print the startup lines; 1 when the numbers do not fit (after printing vLLM's error)."""
        s = self.simulate
        sys.stdout.write(
            "meshdeck: SIMULATED vLLM stand-in for %r on simulated GPUs %s: no model is loaded and no GPU is "
            "used; the numbers below are the agent's estimate of what vLLM would measure here\n"
            % (self.model, s["gpus"])
        )
        sys.stdout.flush()
        self._open_early_ports()
        weights_at, kv_at = startup_phases(s)
        free = int(os.environ.get("MESHDECK_SIM_GPU_FREE_BYTES", "0") or 0) or None
        if self._sleep(weights_at):
            return 0
        if free is not None and CONTEXT_BYTES + s["weights_bytes"] > free:
            return _fail(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %.2f GiB. GPU %d has a total capacity "
                "of %.2f GiB of which %.2f GiB is free. (simulated)"
                % (min(s["weights_bytes"], 1.75 * GIB) / GIB, s["gpus"][0], (free + 0.5 * GIB) / GIB, free / GIB)
            )
        _say(
            "Worker_TP0",
            "gpu_model_runner.py:2653",
            "Model loading took %.4f GiB and %.6f seconds" % (s["weights_bytes"] / GIB, weights_at),
        )
        if self._sleep(kv_at - weights_at):
            return 0
        if s["kv_tokens"] <= 0 or (free is not None and s["gpu_memory_bytes"] > free):
            return _fail(
                "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine. (simulated)"
            )
        _say("Worker_TP0", "gpu_worker.py:349", "Available KV cache memory: %.2f GiB" % (s["kv_cache_bytes"] / GIB))
        if s["kv_tokens"] < s["max_model_len"]:
            per_token = s.get("kv_bytes_per_token") or 0
            return _fail(
                "ValueError: To serve at least one request with the models's max seq len (%d), (%.2f GiB KV cache "
                "is needed, which is larger than the available KV cache memory (%.2f GiB). Based on the available "
                "memory, the estimated maximum model length is %d. Try increasing `gpu_memory_utilization` or "
                "decreasing `max_model_len` when initializing the engine. (simulated)"
                % (s["max_model_len"], s["max_model_len"] * per_token / GIB, s["kv_cache_bytes"] / GIB, s["kv_tokens"])
            )
        for engine in self.engines:
            process = "EngineCore_DP%s" % engine
            _say(process, "kv_cache_utils.py:1229", "GPU KV cache size: {:,} tokens".format(s["kv_tokens"]))
            _say(
                process,
                "kv_cache_utils.py:1234",
                "Maximum concurrency for {:,} tokens per request: {:.2f}x".format(
                    s["max_model_len"], s["max_concurrency"]
                ),
            )
        if self._sleep(max(0.0, s["startup_s"] - kv_at)):
            return 0
        return 0

    def _open_early_ports(self) -> None:
        """Listen where a real head listens before it loads (peers connect there; the launcher probes it).
        An address this machine does not have (a simulated head named by another host's address) falls
        back to 127.0.0.1, and says so."""
        for address, port in self.args.early_ports:
            for host in (address, "127.0.0.1"):
                family = socket.AF_INET6 if ":" in host else socket.AF_INET
                try:
                    listener = socket.create_server((host, port), family=family)
                except OSError as exc:
                    if host == "127.0.0.1":
                        exc.filename = "127.0.0.1:%d" % port
                        raise
                    _say("APIServer", "simvllm", "cannot listen on %s:%d (%s); using 127.0.0.1" % (host, port, exc))
                    continue
                self._early.append(listener)
                break

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless stopped; True when SIGTERM arrived."""
        return self._stop.wait(max(0.0, seconds))

    def serve(self) -> int:
        s = self.simulate
        cache_info = {
            "block_size": str(s["block_size"]),
            "cache_dtype": self.args.kv_cache_dtype,
            "enable_prefix_caching": "True",
            "gpu_memory_utilization": "%g" % self.args.gpu_memory_utilization,
            "num_gpu_blocks": str(s["kv_tokens"] // s["block_size"]),
        }
        metrics = ExportedMetrics(self.served_name, self.engines, cache_info)
        loads = [
            EngineLoad(
                engine,
                metrics,
                s["kv_tokens"],
                s["max_model_len"],
                s["request_rate"],
                seed=s["seed"] * 1000 + int(engine),
                max_num_seqs=self.args.max_num_seqs or 256,
            )
            for engine in self.engines
        ]
        if self.port:
            self.server = _http_server(self, metrics)
            threading.Thread(target=self.server.serve_forever, name="http", daemon=True).start()
            _say(
                "APIServer", "api_server.py:1971", "Starting vLLM API server 0 on http://%s:%d" % (self.host, self.port)
            )
            sys.stdout.write("(APIServer pid=%d) INFO:     Application startup complete.\n" % os.getpid())
            sys.stdout.flush()
        started = time.monotonic()
        last = started
        while not self._stop.wait(0.1):
            now = time.monotonic()
            for load in loads:
                load.step(now - started, now - last)
            last = now
        _say("APIServer", "launcher.py:101", "Shutting down FastAPI HTTP server.")
        if self.server is not None:
            self.server.shutdown()
        return 0

    def close(self) -> None:
        for listener in self._early:
            listener.close()

    def stop(self, *_: Any) -> None:
        self._stop.set()


def _http_server(stand_in: StandIn, metrics: ExportedMetrics) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Meshdeck-Simulated", "1")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
            elif path == "/health":
                self._send(200, b"", "text/plain")
            elif path == "/v1/models":
                model = {
                    "id": stand_in.served_name,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "vllm",
                    "root": stand_in.model,
                    "parent": None,
                    "max_model_len": stand_in.simulate["max_model_len"],
                }
                self._send(200, json.dumps({"object": "list", "data": [model]}).encode(), "application/json")
            else:
                self._send(404, b'{"detail":"Not Found"}', "application/json")

        def log_message(self, format: str, *args: Any) -> None:
            return  # vLLM's access log would add a line per scrape

    server = ThreadingHTTPServer((stand_in.host, int(stand_in.port or 0)), Handler)
    server.daemon_threads = True
    return server


def _fail(line: str) -> int:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    return 1


def main(argv: List[str]) -> int:
    if "--" not in argv or "--simulate-json" not in argv:
        sys.stderr.write("usage: meshdeck-agent simvllm --simulate-json FILE -- <vllm argv>\n")
        return 2
    split = argv.index("--")
    own, vllm_argv = argv[:split], argv[split + 1 :]
    path = own[own.index("--simulate-json") + 1]
    with open(path) as handle:
        simulate = json.load(handle)["simulate"]
    stand_in = StandIn(simulate, vllm_argv)
    signal.signal(signal.SIGTERM, stand_in.stop)
    signal.signal(signal.SIGINT, stand_in.stop)
    try:
        code = stand_in.startup()
        if code or stand_in._stop.is_set():
            return code
        return stand_in.serve()
    except OSError as exc:
        return _fail(
            "OSError: [Errno %s] could not bind %s: %s (simulated vLLM stand-in)"
            % (exc.errno, exc.filename or "%s:%s" % (stand_in.host, stand_in.port), exc.strerror)
        )
    finally:
        stand_in.close()
