"""The simulated vLLM stand-in a `--simulate` agent runs in place of `vllm serve` (never silently: only
for a WorkerSpec that carries `simulate`, only on a simulated agent, and its first log line says so).

    meshdeck-agent simvllm --simulate-json <agent.json> -- vllm serve MODEL --port 8000 -tp 8 ...

It reads vLLM's own argv (model, --port, --host, --served-model-name, -tp/-pp/-dp, --headless,
--max-num-seqs ...; anything else is accepted and ignored) and the plan's numbers from `simulate`, then
1. prints vLLM's startup lines in vLLM's format with the plan's numbers (weights, KV memory, KV tokens,
   max concurrency per engine), pausing as a real start would;
2. fails like vLLM when the plan does not fit the simulated GPUs' free memory (the agent passes
   MESHDECK_SIM_GPU_FREE_BYTES): torch's CUDA OOM while loading, or "No available memory for the
   cache blocks" when the KV cache does not fit;
3. serves /metrics (vLLM's metric names, one `engine` per DP rank, synthetic load from simload.py),
   /health and /v1/models on --port until SIGTERM. Every HTTP reply carries `X-Meshdeck-Simulated: 1`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .simload import EngineLoad, ExportedMetrics
from .simspec import CONTEXT_BYTES, startup_phases

GIB = float(1 << 30)


def vllm_arguments(argv: List[str]) -> argparse.Namespace:
    """The vLLM options the stand-in cares about; everything else vLLM accepts is ignored."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--model")
    parser.add_argument("--port", type=int)
    parser.add_argument("--host")
    parser.add_argument("--served-model-name", nargs="+")
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--tensor-parallel-size", "-tp", type=int)
    parser.add_argument("--pipeline-parallel-size", "-pp", type=int)
    parser.add_argument("--data-parallel-size", "-dp", type=int)
    parser.add_argument("--data-parallel-size-local", "-dpl", type=int)
    parser.add_argument("--data-parallel-start-rank", type=int)
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--headless", action="store_true")
    known, rest = parser.parse_known_args(argv)
    positional = [a for a in rest if not a.startswith("-")]
    if known.model is None and "serve" in argv:
        after = argv[argv.index("serve") + 1 :]
        if after and not after[0].startswith("-"):
            known.model = after[0]
    if known.model is None and positional:
        known.model = positional[-1]
    return known


def _stamp() -> str:
    return time.strftime("%m-%d %H:%M:%S")


def _say(process: str, source: str, message: str, level: str = "INFO") -> None:
    sys.stdout.write("(%s pid=%d) %s %s [%s] %s\n" % (process, os.getpid(), level, _stamp(), source, message))
    sys.stdout.flush()


class StandIn:
    def __init__(self, simulate: Dict[str, Any], argv: List[str]) -> None:
        self.simulate = simulate
        self.args = vllm_arguments(argv)
        self.model = self.args.model or simulate["model"]
        names = self.args.served_model_name
        self.served_name = names[0] if names else self.model
        self.port: Optional[int] = simulate.get("port") or self.args.port or (None if self.args.headless else 8000)
        self.host = self.args.host or "127.0.0.1"
        local = simulate["data_parallel_local"]
        start = simulate["data_parallel_start_rank"]
        self.engines = [str(start + e) for e in range(local)]
        self._stop = threading.Event()
        self.server: Optional[ThreadingHTTPServer] = None

    def startup(self) -> int:
        """Print the startup lines; 1 when the plan does not fit (after printing vLLM's error)."""
        s = self.simulate
        sys.stdout.write(
            "meshdeck: SIMULATED vLLM stand-in for %r on simulated GPUs %s: no model is loaded and no GPU is "
            "used; the numbers below come from the deployment plan\n" % (self.model, s["gpus"])
        )
        sys.stdout.flush()
        for flag, given, planned in (
            ("--tensor-parallel-size", self.args.tensor_parallel_size, s["tensor_parallel"]),
            ("--pipeline-parallel-size", self.args.pipeline_parallel_size, s["pipeline_parallel"]),
            ("--data-parallel-size-local", self.args.data_parallel_size_local, s["data_parallel_local"]),
            ("--port", self.args.port, s.get("port")),
        ):
            if given is not None and planned is not None and given != planned:
                _say(
                    "APIServer",
                    "simvllm",
                    "argv says %s %s but the plan says %s; using the plan (simulated)" % (flag, given, planned),
                    "WARNING",
                )
        weights_at, kv_at = startup_phases(s)
        free = int(os.environ.get("MESHDECK_SIM_GPU_FREE_BYTES", "0") or 0) or None
        if self._sleep(weights_at):
            return 0
        if free is not None and CONTEXT_BYTES + s["weights_bytes"] > free:
            sys.stdout.write(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %.2f GiB. GPU %d has a total capacity "
                "of %.2f GiB of which %.2f GiB is free. (simulated)\n"
                % (min(s["weights_bytes"], 1.75 * GIB) / GIB, s["gpus"][0], (free + 0.5 * GIB) / GIB, free / GIB)
            )
            sys.stdout.flush()
            return 1
        _say(
            "Worker_TP0",
            "gpu_model_runner.py:2653",
            "Model loading took %.4f GiB and %.6f seconds" % (s["weights_bytes"] / GIB, weights_at),
        )
        if self._sleep(kv_at - weights_at):
            return 0
        if free is not None and s["gpu_memory_bytes"] > free:
            sys.stdout.write(
                "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine. (simulated)\n"
            )
            sys.stdout.flush()
            return 1
        _say("Worker_TP0", "gpu_worker.py:349", "Available KV cache memory: %.2f GiB" % (s["kv_cache_bytes"] / GIB))
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

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless stopped; True when SIGTERM arrived."""
        return self._stop.wait(max(0.0, seconds))

    def serve(self) -> int:
        s = self.simulate
        cache_info = {
            "block_size": str(s["block_size"]),
            "cache_dtype": "auto",
            "enable_prefix_caching": "True",
            "gpu_memory_utilization": "0.9",
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
    code = stand_in.startup()
    if code or stand_in._stop.is_set():
        return code
    try:
        return stand_in.serve()
    except OSError as exc:
        sys.stdout.write(
            "OSError: [Errno %s] could not bind %s:%s: %s (simulated vLLM stand-in)\n"
            % (exc.errno, stand_in.host, stand_in.port, exc.strerror)
        )
        return 1
