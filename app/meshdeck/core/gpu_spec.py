"""GPU types: what the planner needs to know about one accelerator.

Specs come from `resources/gpus.json` (vendor datasheets, nvidia-smi's memory total; rocm-smi's for AMD
Instinct GPUs), from an agent's inventory (exact bytes), or from a bare memory size ("80GB") when that is all
the user knows. A memory-only spec is marked `assumed` and every number derived from its bandwidth says so.
AMD Instinct GPUs (arch cdna3 / cdna4) carry their Infinity Fabric links instead of NVLink; what vLLM does
differently on them is in `core.rocm`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from meshdeck.core.errors import InputError
from meshdeck.core.rocm import COMPUTE_CAPABILITY as _ROCM_COMPUTE_CAPABILITY
from meshdeck.core.rocm import ROCM_ARCHITECTURES, fp8_torch_dtype, is_rocm_arch
from meshdeck.core.units import GB, GIB, MIB

ARCHITECTURES = ("ampere", "ada", "hopper", "blackwell", *ROCM_ARCHITECTURES, "unknown")
_COMPUTE_CAPABILITY = {
    "ampere": (8, 0),
    "ada": (8, 9),
    "hopper": (9, 0),
    "blackwell": (10, 0),
    **_ROCM_COMPUTE_CAPABILITY,
    "unknown": (0, 0),
}

# nvidia-smi's "Total" is not what CUDA lets a process have: torch.cuda.mem_get_info() reports less.
# Two measured points: H200 143771 MiB -> 139.81 GiB (VLLM-FACTS.md, vLLM 0.16.0 log) and
# H100-80GB 81559 MiB -> 79.22 GiB (vLLM PR #10511 "total_gpu_memory 79.22GiB"). The gap grows with
# the card's memory (page tables); a line through both points: 218 MiB + 0.27 % of the total.
_DRIVER_RESERVED_FIXED_BYTES = 218 * MIB
_DRIVER_RESERVED_FRACTION = 0.0027

# A GPU known by memory size alone: assume a PCIe-class data-center card of the Ampere era for
# bandwidth (conservative) and say so. FP8 support is unknown, so it is treated as missing.
_ASSUMED_HBM_GBPS = 1500.0


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model. Bandwidths in bytes/s; memory_bytes is nvidia-smi's total (rocm-smi's on AMD)."""

    name: str
    arch: str
    memory_bytes: int
    hbm_bytes_per_s: float
    nvlink_bytes_per_s: float  # per GPU, both directions together (NVIDIA's quote); 0 = no NVLink
    pcie_gen: int
    bf16_tflops: float
    fp8_tflops: float  # 0 when the GPU has no FP8 tensor cores
    fp8_native: bool
    assumed: bool = False  # True when only the memory size was given: bandwidths are guesses
    infinity_fabric_links: int = 0  # AMD Instinct: direct xGMI links to peer GPUs (7 on an 8-GPU board)
    infinity_fabric_link_bytes_per_s: float = 0.0  # one link, one direction

    @property
    def compute_capability(self) -> tuple[int, int]:
        return _COMPUTE_CAPABILITY.get(self.arch, (0, 0))

    @property
    def vendor(self) -> str:
        """amd | nvidia | unknown (a GPU known by memory size only)."""
        if self.arch == "unknown":
            return "unknown"
        return "amd" if is_rocm_arch(self.arch) else "nvidia"

    @property
    def fp8_dtype(self) -> str:
        """The torch dtype vLLM keeps FP8 weights / an fp8 KV cache in ("" when the GPU has no FP8 math)."""
        if not self.fp8_native:
            return ""
        return fp8_torch_dtype(self.arch)

    @property
    def torch_visible_bytes(self) -> int:
        """What `torch.cuda.mem_get_info()[1]` reports: the base of vLLM's gpu_memory_utilization.

        On ROCm it is the whole VRAM rocm-smi reports (the catalog's figure), see core.rocm.
        """
        if self.vendor == "amd":
            return self.memory_bytes
        reserved = _DRIVER_RESERVED_FIXED_BYTES + _DRIVER_RESERVED_FRACTION * self.memory_bytes
        return int(self.memory_bytes - reserved)

    @property
    def has_infinity_fabric(self) -> bool:
        return self.infinity_fabric_links > 0 and self.infinity_fabric_link_bytes_per_s > 0

    @property
    def has_nvlink(self) -> bool:
        return self.nvlink_bytes_per_s > 0

    @property
    def pcie_bytes_per_s(self) -> float:
        """One x16 link, one direction (gen4 31.5 GB/s, gen5 63 GB/s)."""
        return {3: 15.75, 4: 31.5, 5: 63.0, 6: 126.0}.get(self.pcie_gen, 31.5) * GB

    @property
    def runs_sparse_mla_kernels(self) -> bool:
        """vLLM's FlashMLA-sparse (V3.2 DSA) is built for SM90 and SM100 only."""
        return self.arch in ("hopper", "blackwell")

    @property
    def is_large_memory_for_vllm_defaults(self) -> bool:
        """vLLM's get_batch_defaults: >= 70 GiB and not an A100 picks the larger scheduler defaults."""
        return self.torch_visible_bytes >= 70 * GIB and "a100" not in self.name.lower()


def gpu_from_catalog_entry(entry: Mapping[str, Any], source: str = "gpus.json") -> GpuSpec:
    """One entry of gpus.json -> GpuSpec, naming the bad field."""
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise InputError(f"{source}: name", "every GPU needs a name")
    where = f"{source}: {name}"

    def number(key: str, *, allow_none: bool = False) -> float:
        value = entry.get(key)
        if value is None and allow_none:
            return 0.0
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise InputError(f"{where}.{key}", f"must be a non-negative number, got {value!r}")
        return float(value)

    arch = entry.get("arch")
    if arch not in ARCHITECTURES:
        raise InputError(f"{where}.arch", f"{arch!r}; allowed: {', '.join(ARCHITECTURES)}")
    memory_mib = number("memory_mib")
    if memory_mib <= 0:
        raise InputError(f"{where}.memory_mib", "must be positive")
    links = number("infinity_fabric_links", allow_none=True)
    if links != int(links):
        raise InputError(f"{where}.infinity_fabric_links", f"must be a whole number, got {links!r}")
    if is_rocm_arch(arch) and not (links and entry.get("infinity_fabric_gbps_per_link")):
        raise InputError(
            f"{where}.infinity_fabric_links",
            "an AMD Instinct GPU needs infinity_fabric_links and infinity_fabric_gbps_per_link",
        )
    return GpuSpec(
        name=name,
        arch=arch,
        memory_bytes=int(memory_mib * MIB),
        hbm_bytes_per_s=number("hbm_gbps") * GB,
        nvlink_bytes_per_s=number("nvlink_gbps") * GB,
        pcie_gen=int(number("pcie_gen")),
        bf16_tflops=number("bf16_tflops", allow_none=True),
        fp8_tflops=number("fp8_tflops", allow_none=True),
        fp8_native=bool(entry.get("fp8_native", False)),
        infinity_fabric_links=int(links),
        infinity_fabric_link_bytes_per_s=number("infinity_fabric_gbps_per_link", allow_none=True) * GB,
    )


def gpus_from_catalog(data: Mapping[str, Any], source: str = "gpus.json") -> tuple[GpuSpec, ...]:
    gpus = data.get("gpus") if isinstance(data, Mapping) else None
    if not isinstance(gpus, list) or not gpus:
        raise InputError(f"{source}: gpus", "must be a non-empty list")
    return tuple(gpu_from_catalog_entry(entry, source) for entry in gpus)


def gpu_from_memory(gib: float, name: str | None = None) -> GpuSpec:
    """A GPU given by memory alone ("80GB"): `gib` is nvidia-smi's total in GiB (80 -> 81920 MiB)."""
    if isinstance(gib, bool) or not isinstance(gib, int | float) or not gib > 0 or gib > 4096:
        raise InputError("gpu", f"memory size must be between 0 and 4096 GiB, got {gib!r}")
    return GpuSpec(
        name=name or f"{gib:g}GB GPU",
        arch="unknown",
        memory_bytes=int(gib * GIB),
        hbm_bytes_per_s=_ASSUMED_HBM_GBPS * GB,
        nvlink_bytes_per_s=0.0,
        pcie_gen=4,
        bf16_tflops=0.0,
        fp8_tflops=0.0,
        fp8_native=False,
        assumed=True,
    )


def _model_token(name: str) -> str:
    """'H200-SXM-141GB' -> 'H200', 'RTX-4090' -> 'RTX4090', 'NVIDIA H100 80GB HBM3' -> 'NVIDIAH10080GBHBM3'."""
    head = name.split("-")[0] if not name.upper().startswith("RTX") else name.replace("-", "")[:7]
    return re.sub(r"[^A-Z0-9]", "", head.upper())


def match_catalog_gpu(name: str, memory_bytes: int | None, catalog: Iterable[GpuSpec]) -> GpuSpec | None:
    """A detected GPU (NVML name, exact memory) as its catalog entry with the detected memory, if one matches.

    The model token must appear in the NVML name as a whole word ("H20" does not match "H200") and the
    memory must be within 5 % of the catalog's (H100 80GB vs 94GB NVL are different cards).
    """
    words = set(re.findall(r"[A-Z0-9]+", name.upper().replace("GEFORCE ", "").replace("RTX ", "RTX")))
    for spec in catalog:
        if _model_token(spec.name) not in words:
            continue
        if memory_bytes and abs(memory_bytes - spec.memory_bytes) > 0.05 * spec.memory_bytes:
            continue
        return replace(spec, memory_bytes=memory_bytes) if memory_bytes else spec
    return None


_MEMORY_ARG = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(GB|GIB|G)\s*$", re.IGNORECASE)


def resolve_gpu(argument: str, catalog: Iterable[GpuSpec]) -> GpuSpec:
    """`--gpu` value -> GpuSpec: a catalog name (case-insensitive) or a memory size like `80GB`."""
    specs = tuple(catalog)
    wanted = argument.strip().lower()
    for spec in specs:
        if spec.name.lower() == wanted:
            return spec
    match = _MEMORY_ARG.match(argument)
    if match:
        return gpu_from_memory(float(match.group(1)))
    names = ", ".join(spec.name for spec in specs)
    raise InputError("--gpu", f"unknown GPU {argument!r}; allowed: {names}, or a memory size like 80GB")
