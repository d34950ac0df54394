"""A simulated vLLM deployment on a simulated 8xH200: the agent stands in for `vllm serve` from its own argv
(nothing in the spec asks for it), prints vLLM's startup lines with the numbers it derives, serves vLLM's
metrics per DP engine, and the simulated GPUs hold its memory and carry its NVLink traffic. Everything it
touches says it is simulated."""

from __future__ import annotations

import json
import shutil
import socket
import urllib.request
from pathlib import Path

import pytest
from agent_harness import Client, InProcessAgent, in_process_agent, short_dir, wait_for
from meshdeck_agent.gpu.catalog import parse_simulate
from meshdeck_agent.sim.engine import StandInChooser

GIB = 1 << 30


def _free_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return port


def _argv(port: int, *flags: str) -> list[str]:
    return ["/opt/vllm/bin/vllm", "serve", "deepseek-ai/DeepSeek-V3.2", "--port", str(port), *flags]


@pytest.fixture(scope="module")
def agent():
    with in_process_agent("8xH200", interval_s=0.25, sim_vllm_startup_s=1.5) as running:
        yield running


def _latest(client) -> dict:
    last = client.call("samples.read", {"since_seq": max(0, client_last_seq(client) - 1)})
    return last["samples"][-1]


def client_last_seq(client) -> int:
    return client.call("samples.read", {"since_seq": 10**12})["last_seq"]


def test_the_stand_in_starts_like_vllm_holds_its_memory_and_serves_metrics_per_engine(agent):
    port = _free_port()
    client = agent.client()
    argv = _argv(port, "-tp", "4", "-dp", "2", "--enable-expert-parallel", "--max-model-len", "16384",
                 "--gpu-memory-utilization", "0.85")  # fmt: skip
    expected = StandInChooser(parse_simulate("8xH200"), startup_s=1.5).plan_for(argv, {}, ())
    worker = client.call("workers.start", {"spec": {"argv": argv, "id": "dsv32", "gpus": list(range(8))}})
    assert worker["simulated"] is True and worker["state"] == "running" and worker["argv"] == argv

    startup = {}
    while "max_concurrency" not in startup or "kv_cache_tokens" not in startup or "weights_gib" not in startup:
        event = client.wait_event(lambda e: e["event"] == "log" and e["data"]["worker"] == "dsv32", timeout=30)
        startup.update(event["data"]["fields"])
    assert startup["weights_gib"] == pytest.approx(expected["weights_bytes"] / GIB, abs=0.01)
    assert startup["available_kv_gib"] == pytest.approx(expected["kv_cache_bytes"] / GIB, abs=0.01)
    assert startup["kv_cache_tokens"] == expected["kv_tokens"] > 16384
    assert startup["max_concurrency"] == pytest.approx(expected["kv_tokens"] / 16384, abs=0.01)
    log = client.call("workers.logs", {"id": "dsv32", "offset": 0})["data"]
    assert log.startswith("meshdeck: SIMULATED vLLM stand-in")

    assert wait_for(lambda: _health(port) == 200, timeout=30)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as reply:
        assert reply.headers["X-Meshdeck-Simulated"] == "1"
        assert json.load(reply)["data"][0]["id"] == "deepseek-ai/DeepSeek-V3.2"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    assert 'vllm:kv_cache_usage_perc{engine="0",model_name="deepseek-ai/DeepSeek-V3.2"}' in text
    assert (
        'engine="1"' in text
        and "vllm:generation_tokens_total" in text
        and "vllm:inter_token_latency_seconds_bucket" in text
    )

    def loaded() -> bool:
        sample = _latest(client)
        engines = {w["engine"]: w["metrics"] for w in sample["workers"] if w["id"] == "dsv32"}
        busy = engines.get("", {}).get("generation_tokens_per_s") or 0
        return {"0", "1", ""} <= set(engines) and busy > 0 and (sample["gpus"][0]["nvlink_tx_bytes_per_s"] or 0) > 1e8

    assert wait_for(loaded, timeout=60, interval=0.3)
    sample = _latest(client)
    assert sample["simulated"] is True
    held = expected["gpu_memory_bytes"]
    for gpu in sample["gpus"]:
        assert gpu["memory_used_bytes"] == held + 2 * (1 << 20)
        assert gpu["processes"] and gpu["processes"][0]["used_memory_bytes"] == held
        assert gpu["utilization_pct"] > 0
    aggregate = next(w["metrics"] for w in sample["workers"] if w["id"] == "dsv32" and w["engine"] == "")
    assert aggregate["engines"] == 2 and aggregate["kv_cache_capacity_tokens"] == 2 * expected["kv_tokens"]
    assert 0 <= aggregate["kv_cache_usage_perc"] <= 1

    stopped = client.call("workers.stop", {"id": "dsv32", "grace_s": 5})
    assert stopped["state"] == "stopped"
    assert wait_for(lambda: _latest(client)["gpus"][0]["memory_used_bytes"] < GIB, timeout=10)
    client.close()


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["-tp", "2"], "torch.OutOfMemoryError: CUDA out of memory"),  # ~320 GiB of weights a GPU
        (["-tp", "8", "--gpu-memory-utilization", "0.6"], "No available memory for the cache blocks"),
        (["-tp", "8", "--gpu-memory-utilization", "0.65", "--max-model-len", "163840", "--max-num-seqs", "16"],
         "To serve at least one request with the models's max seq len (163840)"),
    ],
)  # fmt: skip
def test_what_does_not_fit_the_simulated_gpus_fails_like_vllm(agent, flags: list[str], error: str):
    client = agent.client()
    client.call("workers.start", {"spec": {"argv": _argv(_free_port(), *flags), "id": "toobig"}})
    event = client.wait_event(
        lambda e: e["event"] == "worker" and e["data"]["id"] == "toobig" and e["data"]["state"] == "failed"
    )
    assert event["data"]["exit_code"] == 1
    log = client.call("workers.logs", {"id": "toobig", "offset": 0})["data"]
    assert "SIMULATED" in log and error in log and "(simulated)" in log
    client.close()


def _startup_done(client: Client, worker: str) -> dict:
    """The stand-in's KV-cache line, or its failure."""
    return client.wait_event(
        lambda e: (
            (e["event"] == "log" and e["data"]["worker"] == worker and "kv_cache_tokens" in e["data"]["fields"])
            or (e["event"] == "worker" and e["data"]["id"] == worker and e["data"]["state"] == "failed")
        ),
        timeout=30,
    )


def test_a_readopted_stand_in_holds_its_gpus_and_they_are_free_for_the_next_one_once_it_stops():
    """A restarted agent follows the stand-in it re-adopts (also from a spec.json an older agent wrote, which
    carried the plan as `simulate`); free memory for the next stand-in comes from what the stand-ins hold now,
    not from the last sample (here the only one, taken while the first still ran)."""
    directory = short_dir()
    flags = ("-tp", "8", "--gpu-memory-utilization", "0.85", "--max-model-len", "16384")
    try:
        first_agent = InProcessAgent(directory, interval_s=0.25, sim_vllm_startup_s=0.5)
        client = first_agent.client()
        client.call("workers.start", {"spec": {"argv": _argv(_free_port(), *flags), "id": "first"}})
        assert _startup_done(client, "first")["event"] == "log"
        client.close()
        first_agent.stop(stop_workers=False)
        worker_dir = Path(first_agent.config.state_dir) / "workers" / "first"
        spec = json.loads((worker_dir / "spec.json").read_text())
        legacy = json.loads((worker_dir / "agent.json").read_text())["simulate"]
        assert legacy["kv_tokens"] > 0 and "simulate" not in spec
        (worker_dir / "spec.json").write_text(
            json.dumps({**spec, "simulate": legacy})
        )  # as agents before this wrote it
        second_agent = InProcessAgent(directory, interval_s=3600.0, sim_vllm_startup_s=0.5)
        try:
            client = second_agent.client()
            adopted = client.call("workers.list")["workers"]
            assert [(w["id"], w["state"], w["adopted"], w["simulated"]) for w in adopted] == [
                ("first", "running", True, True)
            ]
            assert _latest(client)["gpus"][0]["memory_used_bytes"] > 100 * GIB  # held by "first"
            assert client.call("workers.stop", {"id": "first", "grace_s": 5})["state"] == "stopped"
            client.call("workers.start", {"spec": {"argv": _argv(_free_port(), *flags), "id": "second"}})
            done = _startup_done(client, "second")
            assert done["event"] == "log", client.call("workers.logs", {"id": "second", "offset": 0})["data"]
            client.close()
        finally:
            second_agent.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_what_a_simulated_server_cannot_run_is_refused_naming_the_field(agent):
    client = agent.client()
    ray = client.request("workers.start", {"spec": {"argv": ["ray", "start", "--head", "--block"]}})
    assert ray["error"]["code"] == "bad_params" and "Ray would find no GPUs" in ray["error"]["message"]
    bad_gpu = client.request("workers.start", {"spec": {"argv": _argv(8000, "-tp", "2"), "gpus": [0, 9]}})
    assert bad_gpu["error"]["code"] == "bad_params" and "spec.gpus" in bad_gpu["error"]["message"]
    unknown = client.request("workers.start", {"spec": {"argv": ["vllm", "serve", "org/unknown-model"]}})
    assert "no config.json facts for model 'org/unknown-model'" in unknown["error"]["message"]
    old_client = client.request("workers.start", {"spec": {"argv": _argv(8000), "simulate": {"kind": "vllm"}}})
    assert "spec.simulate: is not part of the protocol any more" in old_client["error"]["message"]
    client.close()


def _health(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
            return reply.status
    except OSError:
        return 0
