"""Host records: stored, listed, removed; duplicates, missing names and unsafe fields refused by name."""

from __future__ import annotations

import pytest
from meshdeck.core.errors import InputError
from meshdeck.store.database import Database
from meshdeck.store.hosts import HostRecord, add_host, find_host, get_host, list_hosts, remove_host


def test_a_host_round_trips_with_every_field(db: Database) -> None:
    record = HostRecord(
        name="gpu-a",
        target="ops@gpu-a.lab.example",
        port=2222,
        identity_file="~/.ssh/id_ed25519",
        jump="bastion@jump.example:22,inner",
        simulate=None,
        prometheus="[fd00::5]:9400",
        added_at=1764480000.5,
    )
    add_host(db, record)
    assert get_host(db, "gpu-a") == record
    assert find_host(db, "nope") is None


def test_hosts_are_listed_in_the_order_they_were_added(db: Database) -> None:
    add_host(db, HostRecord("zeta", "10.0.0.2", added_at=10.0))
    add_host(db, HostRecord("alpha", "10.0.0.1", added_at=20.0))
    add_host(db, HostRecord("sim-1", "localhost", simulate="8xH200", added_at=30.0))
    assert [h.name for h in list_hosts(db)] == ["zeta", "alpha", "sim-1"]


def test_a_duplicate_name_is_refused_and_the_first_host_kept(db: Database) -> None:
    add_host(db, HostRecord("gpu-a", "10.0.0.1"))
    with pytest.raises(InputError, match=r"host.name: a host named 'gpu-a' already exists"):
        add_host(db, HostRecord("gpu-a", "10.9.9.9"))
    assert get_host(db, "gpu-a").target == "10.0.0.1"


def test_removing_returns_the_host_and_a_missing_name_lists_the_known_ones(db: Database) -> None:
    add_host(db, HostRecord("gpu-a", "10.0.0.1"))
    add_host(db, HostRecord("gpu-b", "10.0.0.2"))
    assert remove_host(db, "gpu-a").target == "10.0.0.1"
    with pytest.raises(InputError, match=r"no host named 'gpu-a' \(known: gpu-b\)"):
        remove_host(db, "gpu-a")
    with pytest.raises(InputError, match=r"no host named 'gpu-x' \(known: gpu-b\)"):
        get_host(db, "gpu-x")


def test_missing_host_in_an_empty_database_says_how_to_add_one(db: Database) -> None:
    with pytest.raises(InputError, match="meshdeck hosts add"):
        get_host(db, "gpu-a")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": "-rf"}, "host.name"),
        ({"name": "has space"}, "host.name"),
        ({"name": ""}, "host.name"),
        ({"target": "-oProxyCommand=touch /tmp/x"}, "host.target"),
        ({"target": "ops@host name"}, "host.target"),
        ({"target": ""}, "host.target"),
        ({"target": "a;b"}, "host.target"),
        ({"port": 0}, "host.port"),
        ({"port": 70000}, "host.port"),
        ({"port": True}, "host.port"),
        ({"port": "22"}, "host.port"),
        ({"identity_file": ""}, "host.identity_file"),
        ({"identity_file": "key\nProxyCommand x"}, "host.identity_file"),
        ({"jump": "-J evil"}, "host.jump"),
        ({"jump": "a,,b"}, "host.jump"),
        ({"simulate": ""}, "host.simulate"),
        ({"added_at": float("nan")}, "host.added_at"),
        ({"prometheus": ":9400"}, "host.prometheus"),
        ({"prometheus": "10.0.0.1:0"}, "host.prometheus"),
        ({"prometheus": "10.0.0.1:9400;x"}, "host.prometheus"),
        ({"prometheus": 9400}, "host.prometheus"),
    ],
)
def test_unsafe_or_malformed_fields_are_refused_naming_the_field(kwargs: dict[str, object], field: str) -> None:
    values: dict[str, object] = {"name": "gpu-a", "target": "ops@10.0.0.1", **kwargs}
    with pytest.raises(InputError) as info:
        HostRecord(**values)  # type: ignore[arg-type]
    assert info.value.field == field


@pytest.mark.parametrize("target", ["10.0.0.1", "ops@gpu-a", "root@[fe80::1%eth0]", "[2001:db8::1]", "a_b.c-d"])
def test_ordinary_targets_are_accepted(target: str) -> None:
    assert HostRecord("gpu-a", target).target == target


def test_a_bad_exporter_address_names_the_host_and_the_form() -> None:
    with pytest.raises(InputError) as info:
        HostRecord("gpu-a", "10.0.0.1", prometheus="10.0.0.1:70000")
    assert str(info.value).startswith("host.prometheus: host gpu-a: '10.0.0.1:70000': the port must be 1-65535")
    assert "e.g. 127.0.0.1:9400" in str(info.value)


def test_a_host_without_an_exporter_reads_back_as_none(db: Database) -> None:
    add_host(db, HostRecord("gpu-a", "10.0.0.1"))
    assert get_host(db, "gpu-a").prometheus is None
