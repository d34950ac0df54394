"""A part that dies while the deployment runs: the deployment's reason carries vLLM's own word from that part's
log, as a launch failure carries its log tail. The log lines are vLLM 0.32.0's (CPU build), captured from the
real two-node run when one node's worker process was killed with SIGKILL (tests/integration/vllm)."""

from __future__ import annotations

from pathlib import Path

import pytest
from deploy_fleet import FakeFleet, Recorder, wait_until
from meshdeck.services.deployments.model import worker_id
from meshdeck.services.deployments.registry import LaunchFailed
from meshdeck.services.log_reason import telling_line
from test_deploy_service import make_service, mp_plan, vllm_cluster

KILLED_WORKER_TAIL = """\
(Worker_TP1 pid=4501) INFO 12-01 16:22:12 [cpu_worker.py:260] Explicitly set (1.0/23.54) GiB for KV cache on node 0.
(MainProcess pid=4199) ERROR 12-01 16:22:39 [multiproc_executor.py:315] Worker proc VllmWorker-1 died unexpectedly (exit code: -9), shutting down executor.
(MainProcess pid=4199) INFO 12-01 16:22:39 [multiproc_executor.py:479] [shutdown] Executor: waiting for worker exit count=0
(MainProcess pid=4199) INFO 12-01 16:22:39 [multiproc_executor.py:486] [shutdown] Executor: all workers exited gracefully
"""
KILLED_WORKER_REASON = "Worker proc VllmWorker-1 died unexpectedly (exit code: -9), shutting down executor."
# vLLM 0.32.0's CPU build refusing DeepSeek-V3.2 (tests/fixtures/agent/SOURCES.md §7): the root cause comes first,
# then "EngineCore failed to start." and three exceptions that only point back at it
AGENT_FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "agent"
V32_REFUSED = (
    AGENT_FIXTURES / "vllm-error_v0.32.0-cpu_tiny-deepseek-v3.2_single-node_sparse-attention-refused_excerpt.txt"
).read_text()
V32_REASON = "NotImplementedError: Sparse Attention is not supported on CPU."
# The same build loading DeepSeek-V4 on a CPU without AVX-512 (SOURCES.md): the worker's AttributeError first
V4_REFUSED = (
    AGENT_FIXTURES / "vllm-error_v0.32.0-cpu_tiny-deepseek-v4_single-node_no-avx512-packing_excerpt.txt"
).read_text()
V4_REASON = "AttributeError: '_OpNamespace' '_C' object has no attribute 'convert_weight_packed'"


def test_a_crash_while_running_is_reported_with_vllms_line_from_that_parts_log() -> None:
    fleet = FakeFleet()
    vllm_cluster(fleet)
    recorder = Recorder()
    service = make_service(fleet, recorder)
    snapshot = service.launch(mp_plan(), whole_restarts=0)
    node1 = worker_id(snapshot.id, "vllm-node1")
    fleet.logs[node1] += KILLED_WORKER_TAIL
    fleet.crash("gpu-b", node1, signal=None, exit_code=1)
    wait_until(lambda: service.get(snapshot.id).state == "failed")
    reason = service.get(snapshot.id).reason
    assert reason == f"vllm-node1 on gpu-b exited with status 1; vLLM: {KILLED_WORKER_REASON}"
    assert recorder.finished[-1].reason == reason


@pytest.mark.parametrize(("log", "cause"), [(V32_REFUSED, V32_REASON), (V4_REFUSED, V4_REASON)])
def test_a_part_failing_to_start_names_vllms_root_cause_on_the_first_line(log: str, cause: str) -> None:
    fleet = FakeFleet()
    vllm_cluster(fleet)

    def refuse(host: str, worker: dict) -> None:
        fleet.logs[worker["id"]] += log
        fleet.crash(host, worker["id"], signal=None, exit_code=1)

    fleet.on_start["vllm-node0"] = refuse
    with pytest.raises(LaunchFailed) as failed:
        make_service(fleet).launch(mp_plan())
    first = failed.value.snapshot.reason.splitlines()[0]
    assert first == f"vllm-node0 on gpu-a exited with status 1 while starting; vLLM: {cause}"


def test_a_vllm_part_that_exits_0_while_serving_fails_the_deployment() -> None:
    # the real headless node, its worker killed, shuts its executor down "gracefully" and exits 0: for a
    # server that is no completion (a torch job's rank exiting 0 is), and its peers are stopped
    fleet = FakeFleet()
    vllm_cluster(fleet)
    service = make_service(fleet)
    snapshot = service.launch(mp_plan(), whole_restarts=0)
    node1 = worker_id(snapshot.id, "vllm-node1")
    fleet.logs[node1] += KILLED_WORKER_TAIL
    fleet.finish("gpu-b", node1)
    wait_until(lambda: service.get(snapshot.id).state == "failed")
    assert service.get(snapshot.id).reason == f"vllm-node1 on gpu-b exited with code 0; vLLM: {KILLED_WORKER_REASON}"
    assert fleet.stopped() == [("gpu-a", "vllm-node0")]


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        (KILLED_WORKER_TAIL, KILLED_WORKER_REASON),
        (V32_REFUSED, V32_REASON),
        ("usage: vllm [-h] [-v]\n            ...\nvllm: error: unrecognized arguments: --tensor-paralel 2\n",
         "vllm: error: unrecognized arguments: --tensor-paralel 2"),
        ("(EngineCore pid=23032) ERROR 12-01 16:12:32 [core.py:1512]     req_index = model_runner_output.req_id_to_index[req_id]\n"
         "(EngineCore pid=23032) ERROR 12-01 16:12:32 [core.py:1512]                 ~~~~~~~~~~~~~~~~~~~^^^^^^^^\n"
         "(EngineCore pid=23032) ERROR 12-01 16:12:32 [core.py:1512] KeyError: 'cmpl-a2ce5bb799201a25-0-b84bfb47'\n"
         "(Worker_PP0 pid=24075) INFO 12-01 16:12:32 [multiproc_executor.py:843] Parent process exited, terminating worker queues\n",
         "KeyError: 'cmpl-a2ce5bb799201a25-0-b84bfb47'"),
        ("(APIServer pid=1) INFO 12-01 16:09:52 [entry.py:140] Starting vLLM server on http://0.0.0.0:8124\n", None),
        ("", None),
    ],
)  # fmt: skip
def test_the_telling_line_is_the_last_error_or_exception_without_vllms_prefix(tail: str, expected: str | None) -> None:
    assert telling_line(tail) == expected


def test_a_telling_line_is_one_printable_line_however_long() -> None:
    line = telling_line("(A pid=1) ERROR 12-01 16:22:39 [x.py:1] \x1b[31mboom\x1b[0m " + "x" * 1000)
    assert line is not None and "\x1b" not in line and len(line) < 400
