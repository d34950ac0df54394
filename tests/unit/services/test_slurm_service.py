"""The console's Slurm follower without a cluster: a job whose login node is not connected keeps its last state and
says why, told once; a job seen final is told once; only `--slurm` hosts are clusters (the real cluster's path is
tests/gui/test_slurm_console.py and tests/integration/slurm)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from meshdeck.core.errors import InputError
from meshdeck.services.fleet import FleetService, FleetSettings
from meshdeck.services.slurm_service import SlurmJobChanged, SlurmService
from meshdeck.store.database import Database, open_database
from meshdeck.store.hosts import HostRecord, add_host
from meshdeck.store.slurm_jobs import SlurmJobRecord, add_slurm_job


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[SlurmService, Database]]:
    db = open_database(tmp_path / "m.db")
    fleet = FleetService(FleetSettings(known_hosts=str(tmp_path / "kh"), user_known_hosts=(), ssh_config=None))
    add_host(db, HostRecord(name="hpc", target="me@login.example", scheduler="slurm"))
    add_host(db, HostRecord(name="gpu-a", target="me@10.0.0.5"))
    slurm = SlurmService(fleet, db)
    yield slurm, db
    slurm.close()
    fleet.close()
    db.close()


def test_a_job_whose_login_node_is_not_connected_keeps_its_state_and_says_why_once(service) -> None:
    slurm, db = service
    told: list[SlurmJobChanged] = []
    slurm.subscribe(told.append)
    add_slurm_job(db, SlurmJobRecord("d-open", "hpc", 11, "p", "vllm", 2, state="RUNNING", node_names=("n1", "n2")))
    add_slurm_job(db, SlurmJobRecord("d-done", "hpc", 10, "p", "vllm", 2, state="TIMEOUT", submitted_at=1.0))
    slurm.follow_once()
    slurm.follow_once()  # nothing changed: nothing told again
    by_id = {event.record.deployment: event for event in told}
    assert len(told) == 2 and set(by_id) == {"d-open", "d-done"}
    assert by_id["d-open"].record.state == "RUNNING"
    assert by_id["d-open"].problem == (
        "its state is the last one seen: cluster: the login node hpc is not connected; connect it in the hosts view "
        "first"
    )
    assert by_id["d-done"].problem is None and by_id["d-done"].record.final


def test_only_slurm_login_nodes_are_clusters_and_asking_one_unconnected_says_so(service) -> None:
    slurm, _db = service
    assert slurm.clusters() == ["hpc"]
    with pytest.raises(InputError, match="'gpu-a' is not a Slurm login node"):
        slurm.cluster("gpu-a")
    with pytest.raises(InputError, match="hpc is not connected"):
        slurm.info("hpc")
    with pytest.raises(InputError, match="no Slurm job is recorded for 'nope'"):
        slurm.stop("nope")


def test_a_job_asked_again_with_nothing_new_is_not_told_again(service) -> None:
    from dataclasses import replace

    slurm, db = service
    told: list[SlurmJobChanged] = []
    slurm.subscribe(told.append)
    record = add_slurm_job(db, SlurmJobRecord("d1", "hpc", 12, "p", "vllm", 2, state="RUNNING"))
    slurm._tell(SlurmJobChanged(record))
    slurm._tell(SlurmJobChanged(replace(record, updated_at=record.updated_at + 2.0)))  # a refresh's new stamp only
    slurm._tell(SlurmJobChanged(replace(record, state="COMPLETING", updated_at=record.updated_at + 4.0)))
    assert [event.record.state for event in told] == ["RUNNING", "COMPLETING"]
