"""Pre-flight verdicts: what usually breaks a multi-node bring-up first, judged from the agents' answers.

Each check gives one `CheckResult` per host (or one for the cluster) that passes or fails with a reason
a user can act on. Pure: `services.preflight` gathers the agents' answers and hands them in.

    model files   the model directory exists on every node with the same file list and sizes
    versions      vLLM / torch / NCCL (and Ray) versions are installed and equal across nodes
    GPU memory    enough GPUs, each with free memory ≥ what vLLM will claim (utilization × total)
    ports free    the head can bind every port the plan uses (API, master, DP RPC, Ray, rendezvous)
    reach head    every node opens a TCP connection to each of the head's ports (agent-side probe)
    clocks        node clocks agree within 1 s (logs, NCCL timeouts and Ray heartbeats rely on them)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from meshdeck_agent.wire_inventory import Inventory

from meshdeck.core.text import printable
from meshdeck.launch.network import IB_KINDS, PORT_UP_STATES
from meshdeck.launch.profile import Profile

CLOCK_TOLERANCE_S = 1.0
GIB = 1024**3
REASON_LIMIT = 500  # characters of a reason: it may quote megabytes an agent answered


@dataclass(frozen=True)
class CheckResult:
    check: str
    host: str | None  # None: about the whole cluster
    passed: bool
    reason: str

    def __post_init__(self) -> None:
        # A reason quotes what agents answered (versions, file names, errors) and is shown as it is: it is
        # escaped and cut once, here, for the terminal, the console and the store alike.
        object.__setattr__(self, "reason", printable(self.reason, REASON_LIMIT))

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.check, "host": self.host, "passed": self.passed, "reason": self.reason}


@dataclass(frozen=True)
class PreflightReport:
    results: tuple[CheckResult, ...]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        return tuple(r for r in self.results if not r.passed)

    def as_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "results": [r.as_dict() for r in self.results]}


def _files(answer: Mapping[str, Any]) -> dict[str, int]:
    return {str(path): int(size) for path, size in answer.get("files") or ()}


def model_files(model: str, answers: Mapping[str, Mapping[str, Any] | str]) -> list[CheckResult]:
    """`answers`: host -> its `checks.files` reply (or an error string). The head's files are the reference."""
    results: list[CheckResult] = []
    reference_host: str | None = None
    reference: dict[str, int] = {}
    for host, answer in answers.items():
        if isinstance(answer, str):
            results.append(CheckResult("model files", host, False, f"could not list {model}: {answer}"))
            continue
        if not answer.get("exists"):
            results.append(
                CheckResult("model files", host, False, f"{model} is not on this node; download it to the same path")
            )
            continue
        files = _files(answer)
        total = sum(files.values())
        if answer.get("truncated"):
            results.append(CheckResult("model files", host, False, f"{model}: too many files to compare"))
            continue
        if reference_host is None:
            reference_host, reference = host, files
            results.append(
                CheckResult("model files", host, True, f"{len(files)} files, {total / GIB:.1f} GiB (reference)")
            )
            continue
        missing = sorted(set(reference) - set(files))
        extra = sorted(set(files) - set(reference))
        resized = sorted(p for p in set(files) & set(reference) if files[p] != reference[p])
        if not (missing or extra or resized):
            results.append(CheckResult("model files", host, True, f"same {len(files)} files as {reference_host}"))
            continue
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} (e.g. {missing[0]})")
        if resized:
            p = resized[0]
            parts.append(f"{len(resized)} differ in size (e.g. {p}: {files[p]} vs {reference[p]} bytes)")
        if extra:
            parts.append(f"{len(extra)} extra (e.g. {extra[0]})")
        results.append(CheckResult("model files", host, False, f"differs from {reference_host}: {'; '.join(parts)}"))
    return results


def versions(required: Sequence[str], answers: Mapping[str, Mapping[str, Any] | str]) -> list[CheckResult]:
    """`required`: packages that must be installed and equal ("vllm", "torch", "nccl", "ray")."""
    results: list[CheckResult] = []
    seen: dict[str, dict[str, str]] = {name: {} for name in required}  # package -> host -> version
    for host, answer in answers.items():
        if isinstance(answer, str) or answer.get("error"):
            problem = answer if isinstance(answer, str) else answer["error"]
            results.append(CheckResult("versions", host, False, f"could not read versions: {problem}"))
            continue
        absent = [name for name in required if not answer.get(name)]
        if absent:
            results.append(CheckResult("versions", host, False, f"not installed: {', '.join(absent)}"))
        for name in required:
            if answer.get(name):
                seen[name][host] = str(answer[name])
        if not absent:
            found = ", ".join(f"{name} {answer[name]}" for name in required)
            results.append(CheckResult("versions", host, True, found))
    for name, by_host in seen.items():
        if len(set(by_host.values())) > 1:
            spread = ", ".join(f"{host} {version}" for host, version in by_host.items())
            results.append(CheckResult("versions", None, False, f"{name} differs across nodes: {spread}"))
    return results


def gpu_memory(
    gpus_needed: int,
    utilization: float | None,
    answers: Mapping[str, Sequence[Mapping[str, Any]] | str],
    *,
    allow_cpu: bool = False,
    cpu_runner: str = "the workload runs on CPU with gloo",
) -> list[CheckResult]:
    """`answers`: host -> [{"index", "memory_total_bytes", "memory_used_bytes"}] (latest sample) or an error.

    vLLM claims `utilization × total` on each GPU at start and refuses to start if less is free; a torch
    workload (`utilization` None) needs the GPUs only, and may run on CPU (gloo) where `allow_cpu` (so may
    vLLM's CPU build; `cpu_runner` says which runs there).
    """
    results: list[CheckResult] = []
    for host, gpus in answers.items():
        if isinstance(gpus, str):
            results.append(CheckResult("GPU memory", host, False, f"could not read GPU memory: {gpus}"))
            continue
        if not gpus and allow_cpu:
            results.append(CheckResult("GPU memory", host, True, f"no GPUs: {cpu_runner}"))
            continue
        if len(gpus) < gpus_needed:
            results.append(CheckResult("GPU memory", host, False, f"{len(gpus)} GPU(s), the plan needs {gpus_needed}"))
            continue
        if utilization is None:
            results.append(CheckResult("GPU memory", host, True, f"{gpus_needed} of {len(gpus)} GPU(s) used"))
            continue
        short = []
        tightest = None
        for gpu in sorted(gpus, key=lambda g: g.get("index", 0))[:gpus_needed]:
            total, used = gpu.get("memory_total_bytes"), gpu.get("memory_used_bytes")
            if not isinstance(total, (int, float)) or not isinstance(used, (int, float)):
                short.append(f"GPU {gpu.get('index')}: memory not reported")
                continue
            need, free = utilization * total, total - used
            margin = free - need
            tightest = margin if tightest is None else min(tightest, margin)
            if margin < 0:
                short.append(f"GPU {gpu.get('index')}: {free / GIB:.1f} GiB free < {need / GIB:.1f} GiB needed")
        if short:
            results.append(CheckResult("GPU memory", host, False, "; ".join(short)))
        else:
            spare = f", {tightest / GIB:.1f} GiB to spare on the tightest" if tightest is not None else ""
            results.append(
                CheckResult(
                    "GPU memory", host, True, f"{gpus_needed} GPU(s) with ≥ {utilization:g} × total free{spare}"
                )
            )
    return results


def ports_free(
    head: str, purposes: Mapping[int, str], answer: Mapping[str, Any] | str, *, where: str = "the head"
) -> list[CheckResult]:
    """`answer`: the node's `checks.ports_free` reply {"ports": {"8000": true, ...}} (true = free)."""
    if isinstance(answer, str):
        return [CheckResult("ports free", head, False, f"could not check ports: {answer}")]
    states = answer.get("ports") or {}
    results = []
    for port, purpose in sorted(purposes.items()):
        free = states.get(str(port))
        if free:
            results.append(CheckResult("ports free", head, True, f"{port} ({purpose}) is free"))
        else:
            results.append(CheckResult("ports free", head, False, f"{port} ({purpose}) is already taken on {where}"))
    return results


def reach_head(head_address: str, answers: Mapping[tuple[str, int], Mapping[str, Any] | str]) -> list[CheckResult]:
    """`answers`: (host, port) -> its `checks.tcp_connect` reply, made while a probe listened on the head."""
    results = []
    for (host, port), answer in sorted(answers.items()):
        if isinstance(answer, str):
            results.append(CheckResult("reach head", host, False, f"{head_address}:{port}: {answer}"))
        elif answer.get("ok"):
            rtt = answer.get("rtt_ms")
            timing = f" ({rtt:.1f} ms)" if isinstance(rtt, (int, float)) else ""
            results.append(CheckResult("reach head", host, True, f"{head_address}:{port} reachable{timing}"))
        else:
            why = answer.get("error") or "connection failed"
            results.append(
                CheckResult("reach head", host, False, f"{why} (firewall, or the wrong address for the head?)")
            )
    return results


def clocks(offsets: Mapping[str, tuple[float, float] | str]) -> list[CheckResult]:
    """`offsets`: host -> (agent clock − local clock, ± half the round trip) or an error."""
    results = []
    known = {h: o for h, o in offsets.items() if not isinstance(o, str)}
    for host, offset in offsets.items():
        if isinstance(offset, str):
            results.append(CheckResult("clocks", host, False, f"could not read the clock: {offset}"))
    if len(known) >= 1:
        low_host = min(known, key=lambda h: known[h][0])
        high_host = max(known, key=lambda h: known[h][0])
        spread = known[high_host][0] - known[low_host][0]
        error = known[high_host][1] + known[low_host][1]
        if spread - error > CLOCK_TOLERANCE_S:
            results.append(
                CheckResult(
                    "clocks",
                    None,
                    False,
                    f"{high_host} is {spread:.2f} s ahead of {low_host} (± {error:.2f} s); sync them (chrony/NTP)",
                )
            )
        else:
            results.append(
                CheckResult(
                    "clocks", None, True, f"within {spread:.3f} s (± {error:.3f} s) across {len(known)} node(s)"
                )
            )
    return results


def rdma_devices(profile: Profile, inventories: Mapping[str, Inventory | str]) -> list[CheckResult]:
    """A disaggregated deployment whose KV moves over RDMA (kv_connector.transport: rdma) needs an active
    InfiniBand / RoCE port on every engine node, from its agent's inventory: without one UCX falls back to TCP
    (or fails) and every prompt's KV crawls to decode. A node whose inventory could not be read is named."""
    pools = profile.disaggregated
    if pools is None or pools.kv_connector.transport != "rdma":
        return []
    results = []
    for host in profile.hosts:
        inventory = inventories.get(host)
        if not isinstance(inventory, Inventory):
            why = inventory if isinstance(inventory, str) else "no inventory"
            results.append(CheckResult("rdma devices", host, False, f"could not read its NICs: {why}"))
            continue
        ports = [n.name for n in inventory.nics if n.kind in IB_KINDS and (n.state or "").lower() in PORT_UP_STATES]
        if ports:
            results.append(CheckResult("rdma devices", host, True, f"{', '.join(ports)} active for NIXL/UCX"))
        else:
            results.append(
                CheckResult(
                    "rdma devices",
                    host,
                    False,
                    "no active InfiniBand/RoCE port: NIXL would move KV over TCP; fix the fabric, or set "
                    "disaggregated.kv_connector.transport: tcp to run over TCP knowingly",
                )
            )
    return results
