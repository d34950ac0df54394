"""GPU types the simulated backend can pretend to be, and how `--simulate 8xH200` is parsed.

Figures are the vendors' nominal ones (memory as nvidia-smi reports it where known: H100's 81559 MiB
total / 328 MiB reserved, 72 W idle, 345 MHz idle SM clock and 2619 MHz memory clock come from a
real `nvidia-smi -a` of an H100 SXM; H200's 143771 MiB from a real H200). The rest are datasheet
values. Everything produced from this table is labelled `simulated: true`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

MIB = 1024 * 1024
MAX_SIMULATED_GPUS = 16


@dataclass(frozen=True)
class GpuType:
    key: str  # what --simulate takes, e.g. "H200"
    name: str  # what NVML's nvmlDeviceGetName returns
    arch: str
    memory_mib: int
    reserved_mib: int
    nvlink_links: int  # 0 = PCIe only
    nvlink_link_bytes_per_s: float  # per link, per direction
    nvswitch_count: int  # NVSwitch chips on the baseboard (0 = none)
    pcie_gen: int
    pcie_width: int
    power_limit_w: float
    idle_power_w: float
    idle_temperature_c: float
    max_sm_clock_mhz: int
    idle_sm_clock_mhz: int
    mem_clock_mhz: int
    nic_gbps: int  # per NIC the simulated server carries
    nic_per_gpu: bool  # HGX-style one NIC per GPU, else two NICs per server


_TYPES: Tuple[GpuType, ...] = (
    GpuType(
        "H200", "NVIDIA H200", "hopper", 143771, 570, 18, 25e9, 4, 5, 16, 700.0, 76.0, 32.0, 1980, 345, 3201, 400, True
    ),
    GpuType(
        "H100",
        "NVIDIA H100 80GB HBM3",
        "hopper",
        81559,
        328,
        18,
        25e9,
        4,
        5,
        16,
        700.0,
        72.0,
        33.0,
        1980,
        345,
        2619,
        400,
        True,
    ),
    GpuType(
        "H800", "NVIDIA H800", "hopper", 81559, 328, 8, 25e9, 4, 5, 16, 700.0, 72.0, 33.0, 1980, 345, 2619, 400, True
    ),
    GpuType(
        "H20", "NVIDIA H20", "hopper", 97871, 392, 18, 25e9, 4, 5, 16, 400.0, 62.0, 31.0, 1980, 345, 2619, 400, True
    ),
    GpuType(
        "B200",
        "NVIDIA B200",
        "blackwell",
        183359,
        720,
        18,
        50e9,
        2,
        5,
        16,
        1000.0,
        140.0,
        30.0,
        1965,
        420,
        3996,
        400,
        True,
    ),
    GpuType(
        "A100",
        "NVIDIA A100-SXM4-80GB",
        "ampere",
        81920,
        542,
        12,
        25e9,
        6,
        4,
        16,
        400.0,
        58.0,
        30.0,
        1410,
        210,
        1593,
        200,
        True,
    ),
    GpuType(
        "A800",
        "NVIDIA A800-SXM4-80GB",
        "ampere",
        81920,
        542,
        8,
        25e9,
        6,
        4,
        16,
        400.0,
        58.0,
        30.0,
        1410,
        210,
        1593,
        200,
        True,
    ),
    GpuType("L40S", "NVIDIA L40S", "ada", 46068, 464, 0, 0.0, 0, 4, 16, 350.0, 34.0, 29.0, 2520, 210, 9001, 100, False),
    GpuType(
        "RTX-4090",
        "NVIDIA GeForce RTX 4090",
        "ada",
        24564,
        380,
        0,
        0.0,
        0,
        4,
        16,
        450.0,
        21.0,
        31.0,
        2520,
        210,
        10501,
        100,
        False,
    ),
)

GPU_TYPES: Dict[str, GpuType] = {t.key: t for t in _TYPES}
_ALIASES = {"RTX4090": "RTX-4090", "4090": "RTX-4090", "GEFORCE-RTX-4090": "RTX-4090"}


class SimulateSpecError(ValueError):
    """--simulate got something it cannot build; the message says what is accepted."""


@dataclass(frozen=True)
class SimulateSpec:
    count: int
    gpu: GpuType

    def __str__(self) -> str:
        return "%dx%s" % (self.count, self.gpu.key)


def parse_simulate(text: Optional[str]) -> Optional[SimulateSpec]:
    """'8xH200' -> SimulateSpec(8, H200). None/'' -> None. Raises SimulateSpecError naming the problem."""
    if text is None or not text.strip():
        return None
    match = re.match(r"^\s*(\d+)\s*[xX×*]\s*([A-Za-z0-9\-]+)\s*$", text)
    if not match:
        raise SimulateSpecError("--simulate: expected COUNTxTYPE such as 8xH200, got %r" % text)
    count = int(match.group(1))
    key = match.group(2).upper()
    key = _ALIASES.get(key, key)
    if key not in GPU_TYPES:
        raise SimulateSpecError(
            "--simulate: unknown GPU type %r; known: %s" % (match.group(2), ", ".join(sorted(GPU_TYPES)))
        )
    if not 1 <= count <= MAX_SIMULATED_GPUS:
        raise SimulateSpecError("--simulate: GPU count must be 1-%d, got %d" % (MAX_SIMULATED_GPUS, count))
    return SimulateSpec(count, GPU_TYPES[key])
