"""`bench fleet`'s settings are checked before anything starts: a host count one machine cannot run is
refused naming --host-count and the bound (it once started agents until the machine gave out)."""

from __future__ import annotations

import pytest
from meshdeck.core.errors import InputError
from meshdeck.services.fleet_benchmark import MAX_HOSTS, FleetBenchmarkSettings


@pytest.mark.parametrize("hosts", [0, MAX_HOSTS + 1, 1_000_000_000])
def test_a_host_count_outside_what_one_machine_runs_is_refused_naming_the_bound(hosts: int):
    with pytest.raises(InputError) as raised:
        FleetBenchmarkSettings(hosts=hosts)
    assert str(raised.value) == (
        f"--host-count: must be from 1 to 1000 (each host is two local agent processes), got {hosts}"
    )


def test_the_bound_itself_is_accepted():
    assert FleetBenchmarkSettings(hosts=MAX_HOSTS).hosts == 1000
