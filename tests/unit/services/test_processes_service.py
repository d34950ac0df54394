"""services.processes: a host's `processes` answer decoded once into rows naming their deployment, an agent too
old for the method said so, a malformed answer named by field, and the poller's one request per host."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from meshdeck.commands._host_processes import render
from meshdeck.remote.errors import RpcError, RpcTimeout
from meshdeck.services.processes import HostProcesses, ProcessesUnavailable, ProcessPoller, fetch_processes
from meshdeck_agent.protocol import GpuProcesses, GpuProcessInfo, ProcessListing, ProcessWorker

GIB = 1 << 30
LISTING = ProcessListing(
    ts=1_764_480_000.0,
    simulated=True,
    gpus=(
        GpuProcesses(0, "GPU-0", (
            GpuProcessInfo(7, "compute", 2 * GIB, 0, "root", "python3 mine.py"),
            GpuProcessInfo(4242, "compute", 70 * GIB, 1000, "alice\x1b[31m", "vllm serve \x1b[2Jdeepseek", True,
                           ProcessWorker("ds32-0101-ab12.vllm-node0", "meshdeck:ds32-0101-ab12:0:vllm-node0")),
        )),
        GpuProcesses(1, "GPU-1", (
            GpuProcessInfo(5151, "compute+graphics", None, None, None, None, False, ProcessWorker("w-1234abcd", "")),
        )),
        GpuProcesses(2, "GPU-2", ()),
    ),
)  # fmt: skip


class FakeFleet:
    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, str]] = []
        self.release = threading.Event()
        self.release.set()

    def call(self, host: str, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        self.calls.append((host, method))
        self.release.wait(10)
        answer = self.answers[host]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_rows_name_the_deployment_and_part_of_a_meshdeck_worker_and_escape_what_the_agent_sent():
    listing = fetch_processes(FakeFleet({"gpu-a": LISTING.to_wire()}), "gpu-a")
    assert listing.simulated and listing.gpus == (0, 1, 2)
    assert [(r.gpu, r.pid) for r in listing.rows] == [(0, 4242), (0, 7), (1, 5151)]  # most memory first per GPU
    vllm, mine, unknown = listing.rows
    assert (vllm.deployment, vllm.part) == ("ds32-0101-ab12", "vllm-node0")
    assert vllm.owner_text == "ds32-0101-ab12 / vllm-node0" and vllm.memory_text == "70.00 GiB"
    assert vllm.user_text == "alice\\x1b[31m" and vllm.command_text == "vllm serve \\x1b[2Jdeepseek…"
    assert vllm.kind_code == "C"
    assert mine.owner_text == "" and mine.user_text == "root"
    assert unknown.owner_text == "worker w-1234abcd" and unknown.kind_code == "C+G"
    assert (
        unknown.memory_text == "n/a" and unknown.user_text == "?" and unknown.command_text.startswith("? (not visible")
    )


def test_an_agent_without_the_method_is_too_old_to_list_processes():
    old = RpcError("gpu-a", "processes", "unknown_method", "unknown method 'processes'")
    with pytest.raises(ProcessesUnavailable) as caught:
        fetch_processes(FakeFleet({"gpu-a": old}), "gpu-a", agent_version="0.1.0")
    assert caught.value.too_old
    assert "gpu-a: this agent is too old to list processes (meshdeck-agent 0.1.0)" in caught.value.message
    assert "restart the agent" in caught.value.message


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ({"ts": 1_764_480_000.0, "gpus": [{"index": 0, "processes": [{"pid": "x", "kind": "compute"}]}]},
         "gpu-a: the agent's processes.gpus[0].processes[0].pid is malformed: must be an integer"),
        (RpcError("gpu-a", "processes", "internal", "OSError: \x1b[2J"), "internal: OSError: \\x1b[2J"),
        (RpcTimeout("gpu-a: no answer to processes within 15 s"), "no answer to processes within 15 s"),
    ],
)  # fmt: skip
def test_an_answer_that_cannot_be_listed_says_why_in_one_escaped_line(answer, said):
    with pytest.raises(ProcessesUnavailable) as caught:
        fetch_processes(FakeFleet({"gpu-a": answer}), "gpu-a")
    assert said in caught.value.message and not caught.value.too_old and caught.value.message.isprintable()


def test_the_poller_never_asks_a_host_again_before_it_answered():
    fleet = FakeFleet({"gpu-a": LISTING.to_wire(), "gpu-b": LISTING.to_wire()})
    fleet.release.clear()
    done: list[tuple[str, object]] = []
    arrived = threading.Event()
    poller = ProcessPoller(fleet, lambda host, outcome: (done.append((host, outcome)), arrived.set()))
    try:
        assert poller.request("gpu-a") and poller.request("gpu-b")
        assert not poller.request("gpu-a") and not poller.request("gpu-a")  # still in flight
        assert poller.in_flight() == {"gpu-a", "gpu-b"}
        fleet.release.set()
        assert arrived.wait(10)
        while len(done) < 2:
            arrived.wait(0.05)
        assert sorted(host for host, _ in done) == ["gpu-a", "gpu-b"]
        assert all(isinstance(outcome, HostProcesses) for _, outcome in done)
        assert sorted(fleet.calls) == [("gpu-a", "processes"), ("gpu-b", "processes")]
        assert poller.request("gpu-a")  # answered: it may be asked again
    finally:
        poller.close(wait=True)
    assert not poller.request("gpu-a")  # closed


def test_the_cli_table_has_nvitops_columns_escapes_every_cell_and_names_idle_gpus():
    text = render(fetch_processes(FakeFleet({"gpu-a": LISTING.to_wire()}), "gpu-a"))
    lines = text.splitlines()
    assert lines[0] == "gpu-a [SIMULATED]: 3 processes on 3 GPUs"
    assert lines[1].split() == ["GPU", "PID", "TYPE", "USER", "GPU", "MEMORY", "DEPLOYMENT", "/", "PART", "COMMAND"]
    assert "ds32-0101-ab12 / vllm-node0" in lines[2] and "70.00 GiB" in lines[2]
    assert lines[-1] == "no processes on GPU 2"
    assert "\x1b" not in text and all(line.isprintable() for line in lines)


def test_the_cli_says_why_a_host_has_no_gpus():
    listing = HostProcesses("cpu-a", 1.0, False, (), (), reason="nvmlInit failed: \x1b[2Jno driver")
    assert render(listing).splitlines()[1] == "  no GPUs: nvmlInit failed: \\x1b[2Jno driver"
