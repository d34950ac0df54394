"""The registry's change events cross the bridge bounded: one waits per deployment (the newest snapshot) and
per watched log (its text so far), in the order the first change came, and no flood sheds them."""

from __future__ import annotations

import threading
from dataclasses import replace

from meshdeck.remote.events import AgentEvent
from meshdeck.services.deployments.events import DeploymentChanged, DeploymentLogLines
from meshdeck.services.deployments.model import DeploymentSnapshot
from meshdeck.ui.bridge import FleetBridge


def _snapshot(deployment_id: str, state: str = "starting") -> DeploymentSnapshot:
    return DeploymentSnapshot(deployment_id, "ds32", "vllm", state, "", (), 1.0)


def test_a_burst_of_changes_waits_as_one_newest_snapshot_per_deployment(qtbot) -> None:
    bridge = FleetBridge()
    bridge.stop()  # drained by hand below
    delivered: list[DeploymentChanged] = []
    bridge.deployment_changed.connect(delivered.append)

    def burst(deployment_id: str) -> None:
        for n in range(1000):
            bridge.post(DeploymentChanged(replace(_snapshot(deployment_id), reason=str(n))))

    posters = [threading.Thread(target=burst, args=(d,)) for d in ("a", "b", "c")]
    for poster in posters:
        poster.start()
    for poster in posters:
        poster.join()

    assert bridge.backlog == 3
    bridge.drain(budget_s=1.0)
    assert sorted(e.snapshot.id for e in delivered) == ["a", "b", "c"]
    assert {e.snapshot.reason for e in delivered} == {"999"}  # the newest of each


def test_log_text_waiting_is_appended_and_a_tail_replaces_it(qtbot) -> None:
    bridge = FleetBridge()
    bridge.stop()
    delivered: list[DeploymentLogLines] = []
    bridge.deployment_log.connect(delivered.append)
    bridge.post(DeploymentLogLines("a", "vllm-node0", "old\n"))
    bridge.post(DeploymentLogLines("a", "vllm-node0", "tail\n", reset=True))
    bridge.post(DeploymentLogLines("a", "vllm-node0", "one\n"))
    bridge.post(DeploymentLogLines("a", "vllm-node1", "other\n"))
    bridge.post(DeploymentLogLines("a", "vllm-node0", "two\n"))
    bridge.drain(budget_s=1.0)
    assert delivered == [
        DeploymentLogLines("a", "vllm-node0", "tail\none\ntwo\n", reset=True),
        DeploymentLogLines("a", "vllm-node1", "other\n"),
    ]


def test_a_flood_of_agent_events_sheds_them_but_never_a_deployment_change(qtbot) -> None:
    bridge = FleetBridge(max_events=100)
    bridge.stop()
    changes: list[DeploymentChanged] = []
    bridge.deployment_changed.connect(changes.append)
    bridge.post(DeploymentChanged(_snapshot("a", "running")))
    for n in range(1000):
        bridge.post(AgentEvent("demo-a", "log", {"n": n}))
    bridge.post(DeploymentChanged(_snapshot("a", "degraded")))
    assert bridge.shed_events > 0 and bridge.backlog <= 101
    bridge.drain(budget_s=5.0)
    assert [c.snapshot.state for c in changes] == ["degraded"]


def test_a_slurm_jobs_changes_wait_as_its_newest_record(qtbot) -> None:
    from meshdeck.services.slurm_service import SlurmJobChanged
    from meshdeck.store.slurm_jobs import SlurmJobRecord

    bridge = FleetBridge()
    bridge.stop()
    delivered: list[SlurmJobChanged] = []
    bridge.slurm_job_changed.connect(delivered.append)
    record = SlurmJobRecord("d1", "hpc", 7, "p", "vllm", 2)
    for state in ("PENDING", "RUNNING", "COMPLETING"):
        bridge.post(SlurmJobChanged(replace(record, state=state)))
    bridge.post(SlurmJobChanged(replace(record, deployment="d2")))
    assert bridge.backlog == 2
    bridge.drain(budget_s=1.0)
    assert [(e.record.deployment, e.record.state) for e in delivered] == [("d1", "COMPLETING"), ("d2", "PENDING")]
