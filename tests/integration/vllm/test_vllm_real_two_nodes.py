"""A real vLLM (CPU build) TP=2 across two agent daemons of this machine, watched as the console watches it.

One deployment for the module (a start takes a minute or two on 2 shared cores): the launcher's own
multi-node argv, pre-flight, ordered start and readiness from vLLM itself; real completions; the agents
scraping vLLM's /metrics into the store; vLLM's startup log parsed beside the planner's prediction; then
kill -9 of one node's vLLM, which must turn the deployment failed with the reason vLLM's log gives, and
leave no process behind.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from meshdeck.launch.vllm_flags import flag_values
from meshdeck.services.deployments.model import worker_id
from meshdeck.services.deployments.waits import read_log
from meshdeck.services.vllm_bench import GIB, LocalVllmDeployment, measured_numbers
from meshdeck.store.deployments import get_deployment
from vllm_processes import process_tree, still_running

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
REQUESTS = 24


@pytest.fixture(scope="module")
def running(vllm_executable: str) -> Iterator[LocalVllmDeployment]:
    with LocalVllmDeployment(vllm_executable) as run:
        report = run.run_preflight()
        assert report.passed, report.failures
        run.launch()
        yield run


@pytest.fixture(scope="module")
def loaded(running: LocalVllmDeployment) -> dict:
    load = running.send_load(REQUESTS, concurrency=8, max_tokens=48)
    assert running.wait_stored(load), "the stored samples never caught up with the load"
    return {"load": load}


def test_the_launch_runs_vllms_multi_node_argv_in_order_and_is_ready_by_vllms_own_word(
    running: LocalVllmDeployment,
) -> None:
    plan = running.plan
    assert plan.layout_class == "multi-node-mp"
    head, worker = plan.commands
    assert (head.host, worker.host) == tuple(running.agents.hosts) and (head.stage, worker.stage) == (0, 1)
    for rank, command in enumerate(plan.commands):
        assert command.argv[1:3] == ("serve", running.profile.model)
        flags = flag_values(list(command.argv[3:]))
        assert flags["--tensor-parallel-size"] == "2" and flags["--nnodes"] == "2"
        assert flags["--node-rank"] == str(rank) and flags["--master-addr"] == "127.0.0.1"
        assert ("--headless" in flags) == (rank == 1) and ("--port" in flags) == (rank == 0)
        assert command.env_dict["VLLM_HOST_IP"] == "127.0.0.1"
    snapshot = running.current()
    assert snapshot.state == "running", snapshot.reason
    assert {w.state for w in snapshot.workers} == {"running"}
    head_log = read_log(
        lambda *a: running.agents.fleet.call(*a, timeout=60), head.host, worker_id(running.deployment_id, head.name)
    )
    assert "Application startup complete" in head_log  # the serving check is vLLM's own line
    assert "world_size=2 rank=0" in head_log and "master_addr=127.0.0.1, mq_connect_ip=127.0.0.1" in head_log


def test_real_completions_are_answered_and_vllms_metrics_are_stored(running: LocalVllmDeployment, loaded: dict) -> None:
    load = loaded["load"]
    assert (load.ok, load.failed) == (REQUESTS, 0), load.errors
    assert load.completion_tokens == REQUESTS * 48
    assert running.stored_max("kv_cache_usage_perc") > 0.0  # KV blocks held while requests decoded
    assert running.stored_max("num_requests_running") >= 1
    assert running.stored_max("generation_tokens_total") == load.completion_tokens
    assert running.stored_max("prompt_tokens_total") > 0
    hosts = {host for host, *_ in running.stored("kv_cache_usage_perc")}
    assert hosts == {running.agents.hosts[0]}  # the head serves the API and its agent scrapes it
    assert running.stored_rows() > 0


def test_planned_and_logged_kv_numbers_agree_within_one_percent(running: LocalVllmDeployment) -> None:
    snapshot = running.current()
    measured = measured_numbers(snapshot)
    planned = running.plan.planned
    assert planned is not None, running.planned_note
    assert measured["kv_cache_tokens"] == pytest.approx(planned.kv_tokens, rel=0.01)
    assert measured["available_kv_gib"] * GIB == pytest.approx(planned.kv_cache_bytes, rel=0.01)
    logged_bytes_per_token = measured["available_kv_gib"] * GIB / measured["kv_cache_tokens"]
    assert logged_bytes_per_token == pytest.approx(planned.kv_cache_bytes / planned.kv_tokens, rel=0.01)
    # the store keeps both sides for the deployment's planned-vs-measured view
    record = get_deployment(running.db, running.deployment_id)
    assert record.planned is not None and record.planned["kv_cache_tokens"] == planned.kv_tokens
    stored = [numbers for numbers in record.measured.values() if "kv_cache_tokens" in numbers]
    assert stored and stored[0]["kv_cache_tokens"] == measured["kv_cache_tokens"]


def test_kill_9_of_one_nodes_vllm_worker_fails_the_deployment_with_vllms_reason_and_leaves_nothing(
    running: LocalVllmDeployment, loaded: dict
) -> None:
    trees = []
    for host, command in zip(running.agents.hosts, ("vllm-node0", "vllm-node1"), strict=True):
        listing = running.agents.fleet.call(host, "workers.list", timeout=30)["workers"]
        record = next(w for w in listing if w["id"] == worker_id(running.deployment_id, command))
        trees += process_tree(record["pid"])
        if command == "vllm-node1":
            # the node's vLLM worker (the process holding its half of the model), as the OOM killer would
            (victim,) = [p.pid for p in process_tree(record["pid"]) if "Worker_TP1" in " ".join(p.cmdline())]
    assert len(trees) >= 4  # each node: its `vllm serve` and at least its engine / worker process
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 300
    while (snapshot := running.current()).state != "failed":
        assert time.monotonic() < deadline, snapshot
        time.sleep(0.5)
    # the headless node shuts its executor down and exits 0: for a server, a failure all the same
    assert snapshot.reason.startswith("vllm-node1 on local-1 exited with code 0; "), snapshot.reason
    # vLLM's own line from that node's log
    # (vLLM reports the worker's exit code as -9, or None when it looks before the process is reaped)
    assert "; vLLM: Worker proc VllmWorker-1 died unexpectedly (exit code: " in snapshot.reason, snapshot.reason
    assert {w.command: w.state for w in snapshot.workers} == {"vllm-node0": "stopped", "vllm-node1": "exited"}
    assert not still_running(trees, within_s=60), "vLLM processes outlived the failed deployment"
