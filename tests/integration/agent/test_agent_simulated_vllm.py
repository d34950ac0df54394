"""A simulated vLLM deployment on a simulated 8xH200: the stand-in prints vLLM's startup lines with the
plan's numbers, serves vLLM's metrics per DP engine, and the simulated GPUs hold its memory and carry
its NVLink traffic. Everything it touches says it is simulated."""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest
from agent_harness import in_process_agent, wait_for

GIB = 1 << 30


def _free_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return port


def _plan(port: int, **overrides) -> dict:
    plan = {
        "kind": "vllm",
        "gpus": list(range(8)),
        "gpu_memory_bytes": 118 * GIB,
        "weights_bytes": int(80.78 * GIB),
        "kv_cache_bytes": int(30.52 * GIB),
        "kv_tokens": 418304,
        "max_model_len": 16384,
        "tensor_parallel": 4,
        "data_parallel_local": 2,
        "data_parallel_size": 2,
        "expert_parallel": True,
        "port": port,
        "model": "deepseek-ai/DeepSeek-V3.2",
        "seed": 5,
        "startup_s": 1.5,
        "request_rate": 20.0,
    }
    plan.update(overrides)
    return plan


@pytest.fixture(scope="module")
def agent():
    with in_process_agent("8xH200", interval_s=0.25) as running:
        yield running


def _latest(client) -> dict:
    last = client.call("samples.read", {"since_seq": max(0, client_last_seq(client) - 1)})
    return last["samples"][-1]


def client_last_seq(client) -> int:
    return client.call("samples.read", {"since_seq": 10**12})["last_seq"]


def test_the_stand_in_starts_like_vllm_holds_the_plan_and_serves_metrics_per_engine(agent):
    port = _free_port()
    client = agent.client()
    argv = [
        "vllm",
        "serve",
        "deepseek-ai/DeepSeek-V3.2",
        "-tp",
        "4",
        "-dp",
        "2",
        "--enable-expert-parallel",
        "--port",
        str(port),
    ]
    worker = client.call("workers.start", {"spec": {"argv": argv, "id": "dsv32", "simulate": _plan(port)}})
    assert worker["simulated"] is True and worker["state"] == "running"

    startup = {}
    while "max_concurrency" not in startup or "kv_cache_tokens" not in startup or "weights_gib" not in startup:
        event = client.wait_event(lambda e: e["event"] == "log" and e["data"]["worker"] == "dsv32", timeout=30)
        startup.update(event["data"]["fields"])
    assert startup["weights_gib"] == pytest.approx(80.78, abs=0.01)
    assert startup["available_kv_gib"] == pytest.approx(30.52, abs=0.01)
    assert startup["kv_cache_tokens"] == 418304
    assert startup["max_concurrency"] == pytest.approx(418304 / 16384, abs=0.01)

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
    for gpu in sample["gpus"]:
        assert gpu["memory_used_bytes"] == 118 * GIB + 2 * (1 << 20)
        assert gpu["processes"] and gpu["processes"][0]["used_memory_bytes"] == 118 * GIB
        assert gpu["utilization_pct"] > 0
    aggregate = next(w["metrics"] for w in sample["workers"] if w["id"] == "dsv32" and w["engine"] == "")
    assert aggregate["engines"] == 2 and aggregate["kv_cache_capacity_tokens"] == 2 * 418304
    assert 0 <= aggregate["kv_cache_usage_perc"] <= 1

    stopped = client.call("workers.stop", {"id": "dsv32", "grace_s": 5})
    assert stopped["state"] == "stopped"
    assert wait_for(lambda: _latest(client)["gpus"][0]["memory_used_bytes"] < GIB, timeout=10)
    client.close()


def test_a_plan_that_does_not_fit_fails_like_vllm(agent):
    port = _free_port()
    client = agent.client()
    too_big = _plan(port, gpu_memory_bytes=150 * GIB, kv_cache_bytes=60 * GIB, data_parallel_local=1, startup_s=0.5)
    client.call("workers.start", {"spec": {"argv": ["vllm", "serve", "x"], "id": "toobig", "simulate": too_big}})
    event = client.wait_event(
        lambda e: e["event"] == "worker" and e["data"]["id"] == "toobig" and e["data"]["state"] == "failed"
    )
    assert event["data"]["exit_code"] == 1
    log = client.call("workers.logs", {"id": "toobig", "offset": 0})["data"]
    assert "SIMULATED" in log and "No available memory for the cache blocks" in log
    client.close()


def test_simulate_specs_are_validated_naming_the_field(agent):
    client = agent.client()
    bad_gpu = client.request("workers.start", {"spec": {"argv": ["vllm"], "simulate": _plan(8000, gpus=[0, 9])}})
    assert bad_gpu["error"]["code"] == "bad_params" and "spec.simulate.gpus" in bad_gpu["error"]["message"]
    missing = _plan(8000)
    del missing["kv_tokens"]
    reply = client.request("workers.start", {"spec": {"argv": ["vllm"], "simulate": missing}})
    assert "spec.simulate.kv_tokens: is required" in reply["error"]["message"]
    unknown = client.request("workers.start", {"spec": {"argv": ["vllm"], "simulate": _plan(8000, colour="red")}})
    assert "spec.simulate.colour" in unknown["error"]["message"]
    client.close()


def _health(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
            return reply.status
    except OSError:
        return 0
