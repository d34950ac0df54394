"""`processes` on a real agent daemon: a simulated server lists its vLLM stand-in's process on every GPU it
holds, named after its worker; on a real backend (NVML replayed by the fake pynvml) a GPU process two levels
below a worker is traced to that worker through /proc, and a process of nobody's is no one's."""

from __future__ import annotations

import copy
import json
import os
import socket
import sys
import threading
from pathlib import Path

import psutil
from agent_harness import Client, in_process_agent, short_dir, wait_for
from fake_pynvml import build
from meshdeck_agent.daemon import Daemon, DaemonConfig
from meshdeck_agent.machine import RealMachine
from meshdeck_agent.protocol import ProcessListing

GIB = 1 << 30
DELLA = json.loads((Path(__file__).resolve().parents[2] / "fakes" / "nvml_capture_h100_della.json").read_text())
NAME = "meshdeck:ds32-0101-ab12:0:vllm-node0"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_simulated_server_lists_its_stand_ins_process_on_each_gpu_it_holds():
    with in_process_agent("8xH200", interval_s=0.25, sim_vllm_startup_s=0.5) as agent:
        client = agent.client()
        argv = ["vllm", "serve", "deepseek-ai/DeepSeek-V3.2", "--port", str(_free_port()), "-tp", "8",
                "--max-model-len", "16384", "--gpu-memory-utilization", "0.85"]  # fmt: skip
        worker = client.call("workers.start", {"spec": {"argv": argv, "id": "ds32.vllm-node0", "name": NAME}})
        assert worker["simulated"] is True

        def listing() -> ProcessListing:
            return ProcessListing.from_wire(client.call("processes"))  # decoded as the app decodes it

        def loaded() -> bool:  # every GPU holds the stand-in's weights and KV cache (they grow while it loads)
            return all(g.processes and (g.processes[0].used_memory_bytes or 0) > 100 * GIB for g in listing().gpus)

        assert wait_for(loaded, timeout=60, interval=0.2)
        answer = listing()
        assert answer.simulated is True and [g.index for g in answer.gpus] == list(range(8))
        for gpu in answer.gpus:
            [process] = gpu.processes
            assert process.pid == worker["pid"] and process.kind == "compute"
            assert process.used_memory_bytes and process.used_memory_bytes > 100 * GIB
            assert process.worker is not None and (process.worker.id, process.worker.name) == ("ds32.vllm-node0", NAME)
            assert process.uid == os.getuid() and "vllm" in (process.command or "")
        assert client.call("workers.stop", {"id": "ds32.vllm-node0", "grace_s": 5})["state"] == "stopped"
        assert wait_for(lambda: not any(g.processes for g in listing().gpus), timeout=20)
        client.close()


CHILD = "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); print('child', p.pid, flush=True); p.wait()"


def test_a_gpu_process_below_a_worker_is_traced_to_it_on_a_real_backend():
    capture = copy.deepcopy(DELLA)
    nvml = build(capture)
    directory = short_dir()
    config = DaemonConfig(socket_path=str(directory / "agent.sock"), state_dir=str(directory / "state"), interval_s=0.5)
    daemon = Daemon(config, machine=RealMachine(nvml_module=nvml))
    daemon.start()
    thread = threading.Thread(target=daemon.serve_forever, daemon=True)
    thread.start()
    try:
        client = Client.connect(config.socket_path)
        # the worker is a shell-less python that starts a child: the child holds the "GPU", as an engine core would
        spec = {"argv": [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {CHILD!r}])"],
                "id": "ds32.vllm-node0", "name": NAME}  # fmt: skip
        client.call("workers.start", {"spec": spec})

        def child_pid() -> int | None:
            log = client.call("workers.logs", {"id": "ds32.vllm-node0", "offset": 0})["data"]
            words = log.split()
            return int(words[words.index("child") + 1]) if "child" in words else None

        assert wait_for(lambda: child_pid() is not None, timeout=30)
        grandchild = child_pid()
        capture["devices"][0]["processes"] = [
            {"pid": grandchild, "used": 30 * GIB},
            {"pid": os.getpid(), "used": None},  # this test: nobody's worker, memory NVML cannot tell
        ]
        answer = ProcessListing.from_wire(client.call("processes"))
        assert answer.simulated is False
        by_pid = {p.pid: p for p in answer.gpus[0].processes}
        assert by_pid[grandchild].worker is not None and by_pid[grandchild].worker.id == "ds32.vllm-node0"
        assert by_pid[grandchild].used_memory_bytes == 30 * GIB and "time.sleep(120)" in (
            by_pid[grandchild].command or ""
        )
        assert by_pid[os.getpid()].worker is None and by_pid[os.getpid()].used_memory_bytes is None
        assert client.call("workers.stop", {"id": "ds32.vllm-node0", "grace_s": 5})["state"] == "stopped"
        client.close()
    finally:
        for record in daemon.supervisor.list_workers():
            if record["state"] in ("starting", "running", "restarting"):
                daemon.supervisor.stop_worker(record["id"], grace_s=2.0)
        daemon.request_shutdown()
        thread.join(timeout=15)
        keepers = [p for p in psutil.Process().children() if "keeper" in " ".join(p.cmdline())]
        psutil.wait_procs(keepers, timeout=20)  # each writes its worker's exit and ends its group first
