"""How a simulated vLLM deployment loads the simulated GPUs and NICs it runs on.

The stand-in (`simvllm`) serves real vLLM metrics under a synthetic request load; the agent scrapes
them like any vLLM. This module turns a worker's layout plus its scraped token rates into per-GPU
memory, SM activity, NVLink and PCIe bytes, and bytes on the network, with DeepSeek-V3/V3.2
dimensions (hidden 7168, 61 layers of which 58 MoE, top-8 routing):

- tensor parallel: two all-reduces of the hidden state per layer; a ring all-reduce moves
  2·(tp−1)/tp of the buffer through each GPU, in bf16.
- expert parallel (with DP attention): per MoE layer each token is dispatched to 8 experts in fp8 and
  combined back in bf16; the share (ep−1)/ep leaves the GPU, split between NVLink (same node) and the
  NICs (other nodes) in proportion to where the other experts live.
- pipeline parallel across nodes: the hidden state of every token crosses each stage boundary.
- weight loading: host → device over PCIe while the stand-in reports it is loading.

These are estimates to make the simulated charts move like a real deployment; they are labelled
simulated wherever they appear.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from ..gpu.simulated import GpuLoad

HIDDEN = 7168
LAYERS = 61
MOE_LAYERS = 58
TOP_K = 8
BF16 = 2
FP8 = 1
# decode tokens/s one Hopper GPU sustains on DeepSeek-V3 with DP attention + EP (order of magnitude)
PEAK_DECODE_TOKENS_PER_GPU = 2500.0
PEAK_PREFILL_TOKENS_PER_GPU = 25000.0


@dataclass(frozen=True)
class SimWorkerActivity:
    """One simulated vLLM worker as the traffic model sees it, per node."""

    worker_id: str
    gpus: Tuple[int, ...]
    held_bytes_per_gpu: int
    pids: Tuple[int, ...] = ()
    loading: bool = False
    loading_bytes_per_s: float = 0.0
    prompt_tokens_per_s: float = 0.0
    generation_tokens_per_s: float = 0.0
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    data_parallel_local: int = 1
    data_parallel_size: int = 1
    expert_parallel: bool = False
    nodes: int = 1


@dataclass(frozen=True)
class MachineLoad:
    gpus: Dict[int, GpuLoad]
    network_bytes_per_s: Dict[int, float]  # GPU index -> bytes/s per direction it puts on its nearest NIC
    busy_cpu_threads: float


def _ring_allreduce_fraction(group: int) -> float:
    return 2.0 * (group - 1) / group if group > 1 else 0.0


def worker_traffic(activity: SimWorkerActivity) -> Tuple[float, float, float, float]:
    """(nvlink bytes/s per GPU, network bytes/s per GPU, compute 0..1, per-GPU tokens/s) per direction."""
    gpus = max(1, len(activity.gpus))
    tokens = max(0.0, activity.prompt_tokens_per_s) + max(0.0, activity.generation_tokens_per_s)
    engines = max(1, activity.data_parallel_local)
    tp = max(1, activity.tensor_parallel)
    pp = max(1, activity.pipeline_parallel)
    tokens_per_engine = tokens / engines
    layers_per_stage = LAYERS / pp
    nvlink = tokens_per_engine * layers_per_stage * 2 * HIDDEN * BF16 * _ring_allreduce_fraction(tp)
    network = 0.0
    if activity.expert_parallel:
        ep = tp * max(1, activity.data_parallel_size)
        ep_local = min(ep, gpus)
        tokens_per_gpu = tokens_per_engine / tp
        a2a = tokens_per_gpu * (MOE_LAYERS / pp) * TOP_K * HIDDEN * (FP8 + BF16) * (ep - 1) / ep
        off_node = (ep - ep_local) / (ep - 1) if ep > 1 else 0.0
        nvlink += a2a * (1.0 - off_node)
        network += a2a * off_node
    if pp > 1 and activity.nodes > 1:
        network += tokens_per_engine * HIDDEN * BF16 / max(1, gpus // engines)
    per_gpu_decode = activity.generation_tokens_per_s / gpus
    per_gpu_prefill = activity.prompt_tokens_per_s / gpus
    compute = min(1.0, per_gpu_decode / PEAK_DECODE_TOKENS_PER_GPU + per_gpu_prefill / PEAK_PREFILL_TOKENS_PER_GPU)
    return nvlink, network, compute, tokens / gpus


def machine_load(activities: Sequence[SimWorkerActivity], gpu_count: int) -> MachineLoad:
    """Sum every worker's demands per GPU. GPUs outside 0..gpu_count-1 are ignored."""
    held: Dict[int, int] = {}
    compute: Dict[int, float] = {}
    nvlink: Dict[int, float] = {}
    pcie_rx: Dict[int, float] = {}
    pcie_tx: Dict[int, float] = {}
    network: Dict[int, float] = {}
    processes: Dict[int, List[Tuple[int, int]]] = {}
    busy_threads = 0.0
    for activity in activities:
        gpus = [g for g in activity.gpus if 0 <= g < gpu_count]
        if not gpus:
            continue
        link_bytes, net_bytes, busy, tokens_per_gpu = worker_traffic(activity)
        if activity.held_bytes_per_gpu > 0:
            # each vLLM engine core busy-polls one CPU thread; the API server takes another
            busy_threads += max(1, activity.data_parallel_local) + 1
        for position, gpu in enumerate(gpus):
            held[gpu] = held.get(gpu, 0) + max(0, activity.held_bytes_per_gpu)
            compute[gpu] = min(1.0, compute.get(gpu, 0.0) + busy)
            nvlink[gpu] = nvlink.get(gpu, 0.0) + link_bytes
            network[gpu] = network.get(gpu, 0.0) + net_bytes
            rx = activity.loading_bytes_per_s if activity.loading else 0.0
            pcie_rx[gpu] = pcie_rx.get(gpu, 0.0) + rx + tokens_per_gpu * 8
            pcie_tx[gpu] = pcie_tx.get(gpu, 0.0) + tokens_per_gpu * 4
            if activity.pids and activity.held_bytes_per_gpu > 0:
                pid = activity.pids[min(position, len(activity.pids) - 1)]
                processes.setdefault(gpu, []).append((pid, activity.held_bytes_per_gpu))
    loads = {
        gpu: GpuLoad(
            held_bytes=held.get(gpu, 0),
            compute=compute.get(gpu, 0.0),
            nvlink_bytes_per_s=nvlink.get(gpu, 0.0),
            pcie_tx_bytes_per_s=pcie_tx.get(gpu, 0.0),
            pcie_rx_bytes_per_s=pcie_rx.get(gpu, 0.0),
            processes=tuple(processes.get(gpu, ())),
        )
        for gpu in set(held) | set(compute)
    }
    return MachineLoad(loads, network, busy_threads)
