"""Host and network readers on recorded and fabricated sysfs/procfs trees."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_sysfs_tree import della_tree, net_interface, pci_device, proc_files, set_ib_counters, set_net_counters
from meshdeck_agent.host import HostReader, parse_cpu_list, parse_meminfo, parse_proc_stat_cpu
from meshdeck_agent.net import NetReader, parse_ib_rate, parse_ib_state
from meshdeck_agent.wire_sample import NicSample

PROCFS_TREE = Path(__file__).resolve().parents[2] / "fakes" / "agent_sysfs_procfs"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_infiniband_ports_from_the_procfs_fixture():
    reader = NetReader(str(PROCFS_TREE))
    nics = {n["name"]: n for n in reader.inventory()}
    assert set(nics) == {"hfi1_0/1", "mlx4_0/1", "mlx4_0/2", "mlx5_0/1"}
    assert nics["hfi1_0/1"]["rate_gbps"] == 100.0 and nics["mlx4_0/2"]["rate_gbps"] == 40.0
    assert nics["mlx5_0/1"]["rate_gbps"] == 25.0 and nics["mlx5_0/1"]["state"] == "ACTIVE"
    assert all(n["kind"] == "infiniband" for n in nics.values())
    counters = {name: (tx, rx) for name, _, tx, rx in reader.counters()}
    assert counters["mlx5_0/1"] == (2880761508848 * 4, 18126345378 * 4)  # words of 4 bytes
    assert counters["hfi1_0/1"] == (273558326543 * 4, 345091702026 * 4)


def test_ib_rates_are_counter_deltas_times_four_over_elapsed_time(tmp_path):
    device = pci_device(tmp_path, ["pci0000:17", "0000:17:01.0", "0000:19:00.0"], 0)
    from agent_sysfs_tree import ib_port

    ib_port(tmp_path, "mlx5_0", device, layer="Ethernet", rate="100 Gb/sec (4X EDR)", tx=1_000, rx=2_000)
    clock = Clock()
    reader = NetReader(str(tmp_path), clock=clock)
    first = reader.read()
    assert first == [NicSample("mlx5_0/1", "roce", None, None)]
    set_ib_counters(tmp_path, "mlx5_0", 1_000 + 250_000_000, 2_000 + 125_000_000)
    clock.now += 2.0
    second = reader.read()[0]
    assert second.tx_bytes_per_s == 500_000_000 and second.rx_bytes_per_s == 250_000_000
    set_ib_counters(tmp_path, "mlx5_0", 5, 5)  # counter reset
    clock.now += 1.0
    assert reader.read()[0].tx_bytes_per_s is None
    assert reader.inventory()[0]["pci_bus_id"] == "0000:19:00.0"


def test_ethernet_counts_physical_interfaces_only(tmp_path):
    nic = pci_device(tmp_path, ["pci0000:00", "0000:00:03.0", "0000:03:00.0"], 0)
    net_interface(tmp_path, "eth0", nic, speed=100000, tx=10, rx=20)
    net_interface(tmp_path, "ib0", nic, kind=32)
    net_interface(tmp_path, "docker0", None)
    net_interface(tmp_path, "lo", None)
    clock = Clock()
    reader = NetReader(str(tmp_path), clock=clock)
    assert [n["name"] for n in reader.inventory()] == ["eth0"]
    assert reader.inventory()[0]["rate_gbps"] == 100.0 and reader.inventory()[0]["kind"] == "ethernet"
    reader.read()
    set_net_counters(tmp_path, "eth0", 10 + 1_000_000, 20 + 3_000_000)
    clock.now += 0.5
    assert reader.read() == [NicSample("eth0", "ethernet", 2_000_000.0, 6_000_000.0)]


def test_host_cpu_busy_share_and_ram_from_proc(tmp_path):
    proc_files(tmp_path, busy=1000, idle=9000, mem_total_kb=1_000_000, mem_available_kb=250_000)
    reader = HostReader(str(tmp_path))
    first = reader.read()
    assert first.value("cpu_pct") is None
    assert first.value("ram_total_bytes") == 1_000_000 * 1024 and first.value("ram_used_bytes") == 750_000 * 1024
    proc_files(tmp_path, busy=1000 + 300, idle=9000 + 100, mem_total_kb=1_000_000, mem_available_kb=250_000)
    assert reader.read().value("cpu_pct") == pytest.approx(75.0)
    info = reader.cpu_info()
    assert info["model"] == "Intel(R) Xeon(R) Platinum 8480+" and info["sockets"] == 2 and info["threads"] == 4
    assert info["numa_nodes"] == [{"node": 0, "cpus": [0, 1]}, {"node": 1, "cpus": [2, 3]}]


def test_parsers_for_proc_and_sysfs_text():
    assert parse_proc_stat_cpu("cpu  10 5 5 80 0 0 0 0 0 0\n") == (20, 100)
    assert parse_meminfo("MemTotal: 2 kB\nHugePages_Total: 3\n") == {"MemTotal": 2048, "HugePages_Total": 3}
    assert parse_cpu_list("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_ib_rate("400 Gb/sec (4X NDR)") == 400.0 and parse_ib_rate("2.5 Gb/sec (1X SDR)") == 2.5
    assert parse_ib_rate(None) is None and parse_ib_state("4: ACTIVE") == "ACTIVE"


def test_a_real_machine_samples_gpus_host_and_nics_from_its_root(tmp_path):
    from agent_sysfs_tree import nvswitch_capture
    from fake_pynvml import build
    from meshdeck_agent.machine import RealMachine

    layout = della_tree(tmp_path)
    machine = RealMachine(root=str(tmp_path), nvml_module=build(nvswitch_capture(layout["gpu_bus_ids"])))
    sample = machine.read(0.0)
    assert len(sample.gpus) == 8 and sample.host.value("ram_total_bytes") > 0
    assert [n.name for n in sample.nics] == layout["nics"]
