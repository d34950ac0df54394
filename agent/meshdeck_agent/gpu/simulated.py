"""Simulated GPUs for `--simulate 8xH200`: the type's real memory and link layout, idle-realistic
power and temperature, and memory / NVLink / PCIe numbers that follow the simulated workers.

Deterministic for a seed: the same seed and the same sequence of `read` calls give the same numbers.
The agent marks every inventory and sample it builds from this backend `simulated: true`. ECC counts are
mostly 0; a seeded few servers get one uncorrected error on one GPU (see FAULTY_SERVER_SHARE), so a
fleet of simulated agents, each with its own seed, shows the fleet view's alert now and then.

Layout: SXM parts (H100/H200/H20/H800/B200/A100/A800) sit on NVSwitch baseboards of up to 8 GPUs,
every link of every GPU on the board's switches (NV18 between all pairs of an H200 board); a 9-16 GPU
simulation has two baseboards joined only through the CPUs (SYS), as two HGX boards in one chassis
would be. PCIe parts (L40S, RTX-4090) have no NVLink: pairs share a PCIe switch (PIX), else a NUMA
node (NODE), else SYS. With 4 or more GPUs they are split evenly over two NUMA nodes.
"""

from __future__ import annotations

import math
import random
import uuid
from dataclasses import dataclass
from typing import List, Mapping, Optional, Tuple

from ..wire_inventory import Gpu, NvLink
from ..wire_sample import GpuProcess, GpuSample
from .catalog import MIB, SimulateSpec
from .processes import COMPUTE, RawGpuProcesses

BOARD_SIZE = 8
# PCI bus numbers of the eight GPUs on a real HGX H100 board, in GPU index order.
_HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
_SWITCH_BUSES = (0x05, 0x06, 0x07, 0x08, 0x09, 0x0A)
IDLE_USED_BYTES = 2 * MIB  # nvidia-smi shows ~2 MiB used on an idle H100
# ECC, far more often than real HBM fails, so a fleet view shows one now and then: one simulated server in
# 16 has a GPU that takes one uncorrected error within FAULT_WITHIN_S of its first sample (and is left
# with a row remap pending, as a Hopper GPU is); one GPU in 8 leaks corrected errors, one every few minutes.
FAULTY_SERVER_SHARE = 1 / 16
FAULT_WITHIN_S = 600.0
LEAKY_GPU_SHARE = 1 / 8
LEAK_EVERY_S = (120.0, 900.0)  # mean seconds between a leaky GPU's corrected errors, drawn per GPU


@dataclass(frozen=True)
class GpuLoad:
    """What the simulated workers ask of one GPU right now."""

    held_bytes: int = 0
    compute: float = 0.0  # 0..1, share of the SMs kept busy
    nvlink_bytes_per_s: float = 0.0  # per direction, all links together
    pcie_tx_bytes_per_s: float = 0.0  # device -> host
    pcie_rx_bytes_per_s: float = 0.0  # host -> device
    processes: Tuple[Tuple[int, int], ...] = ()  # (pid, bytes held)


def gpu_bus_id(index: int) -> str:
    board, slot = divmod(index, BOARD_SIZE)
    return "%08X:%02X:00.0" % (board, _HGX_BUSES[slot])


def switch_bus_id(board: int, switch: int) -> str:
    return "%08X:%02X:00.0" % (board, _SWITCH_BUSES[switch % len(_SWITCH_BUSES)])


def numa_node(index: int, count: int) -> int:
    """Servers with 4+ GPUs split them over two sockets; smaller ones keep them on the first."""
    return 0 if count < 4 else (index * 2) // count


class SimulatedGpus:
    """The GPU part of a simulated server."""

    def __init__(self, spec: SimulateSpec, seed: int = 0) -> None:
        self.spec = spec
        self.gpu = spec.gpu
        self.count = spec.count
        self._rng = random.Random(seed)
        ids = random.Random(seed ^ 0x5EED)
        self.uuids = ["GPU-%s" % uuid.UUID(int=ids.getrandbits(128), version=4) for _ in range(self.count)]
        self._power = [self.gpu.idle_power_w] * self.count
        self._temperature = [self.gpu.idle_temperature_c] * self.count
        self._last_now: Optional[float] = None
        self._ecc = _SimulatedEcc(self.count, seed)

    # -- inventory -------------------------------------------------------------------------------

    def links_of(self, index: int) -> List[NvLink]:
        board = index // BOARD_SIZE
        switches = max(1, self.gpu.nvswitch_count)
        return [
            NvLink(
                link=link,
                remote_pci_bus_id=switch_bus_id(board, link % switches),
                active=True,
                remote_is_switch=self.gpu.nvswitch_count > 0,
            )
            for link in range(self.gpu.nvlink_links)
        ]

    def inventory(self) -> List[Gpu]:
        return [
            Gpu(
                index=index,
                name=self.gpu.name,
                uuid=self.uuids[index],
                pci_bus_id=gpu_bus_id(index),
                memory_total_bytes=self.gpu.memory_mib * MIB,
                memory_reserved_bytes=self.gpu.reserved_mib * MIB,
                arch=self.gpu.arch,
                pcie_gen=self.gpu.pcie_gen,
                pcie_width=self.gpu.pcie_width,
                nvlink_links=tuple(self.links_of(index)),
                numa_node=numa_node(index, self.count),
                power_limit_w=self.gpu.power_limit_w,
            )
            for index in range(self.count)
        ]

    def matrix(self) -> List[List[str]]:
        labels = []
        for i in range(self.count):
            row = []
            for j in range(self.count):
                row.append("X" if i == j else self.pair_label(i, j))
            labels.append(row)
        return labels

    def pair_label(self, i: int, j: int) -> str:
        if self.gpu.nvlink_links and i // BOARD_SIZE == j // BOARD_SIZE:
            return "NV%d" % self.gpu.nvlink_links
        if numa_node(i, self.count) != numa_node(j, self.count):
            return "SYS"
        if not self.gpu.nvlink_links and i // 2 == j // 2:
            return "PIX"
        return "NODE"

    # -- samples ---------------------------------------------------------------------------------

    def read(self, now: float, loads: Optional[Mapping[int, GpuLoad]] = None) -> List[GpuSample]:
        loads = loads or {}
        dt = 1.0 if self._last_now is None else max(0.05, min(60.0, now - self._last_now))
        self._last_now = now
        self._ecc.advance(now, dt)
        rng = self._rng
        gpu = self.gpu
        total = gpu.memory_mib * MIB
        reserved = gpu.reserved_mib * MIB
        samples = []
        for index in range(self.count):
            load = loads.get(index, GpuLoad())
            compute = max(0.0, min(1.0, load.compute))
            busy = load.held_bytes > 0
            used = min(total - reserved, IDLE_USED_BYTES + max(0, int(load.held_bytes)))
            utilization = 0 if compute <= 0 else int(max(1, min(100, round(compute * 100 + rng.gauss(0, 3)))))
            memory_utilization = 0 if compute <= 0 else int(max(1, min(100, round(compute * 62 + rng.gauss(0, 2)))))
            target_power = gpu.idle_power_w + (gpu.power_limit_w - gpu.idle_power_w) * (
                (0.12 if busy else 0.0) + 0.78 * compute
            )
            follow = 1.0 - math.exp(-dt / 2.0)
            self._power[index] += (target_power - self._power[index]) * follow
            power = max(gpu.idle_power_w * 0.9, self._power[index] + rng.gauss(0, 0.6 + 4 * compute))
            heat = (power - gpu.idle_power_w) / max(1.0, gpu.power_limit_w - gpu.idle_power_w)
            target_temperature = gpu.idle_temperature_c + 42.0 * heat
            self._temperature[index] += (target_temperature - self._temperature[index]) * (1.0 - math.exp(-dt / 40.0))
            if compute > 0:
                sm_clock = gpu.max_sm_clock_mhz - int(abs(rng.gauss(0, 1)) * 15) - int(150 * max(0.0, heat - 0.85))
            elif busy:
                sm_clock = gpu.max_sm_clock_mhz
            else:
                sm_clock = gpu.idle_sm_clock_mhz
            links = self._links(load.nvlink_bytes_per_s, rng)
            tx_total = sum(pair[0] for pair in links)
            rx_total = sum(pair[1] for pair in links)
            pcie_noise = abs(rng.gauss(0, 1)) * 1024 * (40 if busy else 6)
            samples.append(
                GpuSample.of(
                    index,
                    self.uuids[index],
                    nvlink_links=links,
                    processes=(GpuProcess(pid, held) for pid, held in load.processes),
                    ecc_uncorrected_volatile=self._ecc.uncorrected[index],
                    ecc_corrected_volatile=self._ecc.corrected[index],
                    remapped_rows_pending=self._ecc.uncorrected[index] > 0,
                    memory_used_bytes=used,
                    memory_total_bytes=total,
                    memory_reserved_bytes=reserved,
                    utilization_pct=utilization,
                    memory_utilization_pct=memory_utilization,
                    power_w=round(power, 2),
                    power_limit_w=gpu.power_limit_w,
                    temperature_c=round(self._temperature[index]),
                    sm_clock_mhz=sm_clock,
                    mem_clock_mhz=gpu.mem_clock_mhz,
                    nvlink_tx_bytes_per_s=tx_total if gpu.nvlink_links else None,
                    nvlink_rx_bytes_per_s=rx_total if gpu.nvlink_links else None,
                    pcie_tx_bytes_per_s=int(load.pcie_tx_bytes_per_s + pcie_noise),
                    pcie_rx_bytes_per_s=int(load.pcie_rx_bytes_per_s + pcie_noise * 1.3),
                )
            )
        return samples

    def running_processes(self, loads: Optional[Mapping[int, GpuLoad]] = None) -> List[RawGpuProcesses]:
        """Per GPU, the simulated workers' processes on it (each stand-in's pid, the bytes it holds there), in
        pid order: what NVML's compute list would say. Deterministic for the same loads; draws nothing from
        the random streams, so asking does not change the samples."""
        loads = loads or {}
        return [
            RawGpuProcesses(
                index,
                self.uuids[index],
                tuple((pid, COMPUTE, held) for pid, held in sorted(loads.get(index, GpuLoad()).processes)),
            )
            for index in range(self.count)
        ]

    def _links(self, total_per_direction: float, rng: random.Random) -> List[Tuple[int, int]]:
        count = self.gpu.nvlink_links
        if not count:
            return []
        uniform = rng.random
        if total_per_direction <= 0:
            # idle links still carry a trickle of flow-control and keep-alive traffic
            return [(int(uniform() * 400), int(uniform() * 400)) for _ in range(count)]
        cap = self.gpu.nvlink_link_bytes_per_s
        share = total_per_direction / count
        return [
            (int(min(cap, share * (0.97 + 0.06 * uniform()))), int(min(cap, share * (0.97 + 0.06 * uniform()))))
            for _ in range(count)
        ]


class _SimulatedEcc:
    """The volatile ECC counts of a simulated server's GPUs. Its own random stream (from the seed), so the
    other numbers of a seed are what they were before ECC was simulated; deterministic for a seed and a
    sequence of reads. The fault's time counts from the first read."""

    def __init__(self, count: int, seed: int) -> None:
        self._rng = random.Random("ecc-%d" % seed)
        rng = self._rng
        self.uncorrected = [0] * count
        self.corrected = [0] * count
        self._faulty = rng.randrange(count) if rng.random() < FAULTY_SERVER_SHARE else None
        self._fault_after_s = rng.uniform(0.0, FAULT_WITHIN_S)
        self._leak_rate = [
            1.0 / rng.uniform(*LEAK_EVERY_S) if rng.random() < LEAKY_GPU_SHARE else 0.0 for _ in range(count)
        ]
        self._first_now: Optional[float] = None

    def advance(self, now: float, dt: float) -> None:
        if self._first_now is None:
            self._first_now = now
        if self._faulty is not None and now - self._first_now >= self._fault_after_s:
            self.uncorrected[self._faulty] = 1
        for index, rate in enumerate(self._leak_rate):
            if rate and self._rng.random() < rate * dt:
                self.corrected[index] += 1
