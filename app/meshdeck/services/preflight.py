"""Pre-flight: ask every node's agent what usually breaks a launch, before anything is started.

    report = run_preflight(fleet, plan, profile)       # PreflightReport, every check pass/fail + reason
    report.passed

The agents answer (`checks.files`, `checks.versions`, `checks.ports_free`, `checks.tcp_connect`,
`agent.time`, `inventory`, `samples.read`); `meshdeck.launch.preflight_rules` judges. To test that the
nodes reach the head's ports *before* anything listens on them, a short-lived probe worker on the head
binds every planned port (which also proves they are free) while each node's agent connects to it;
the probe is stopped right after. Hosts are asked in parallel. No Qt; callable from a worker thread.
"""

from __future__ import annotations

import posixpath
import re
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from meshdeck_agent.wire_inventory import Inventory

from meshdeck.launch import preflight_rules as rules
from meshdeck.launch.plan import LaunchPlan
from meshdeck.launch.preflight_rules import CheckResult, PreflightReport
from meshdeck.launch.profile import Profile
from meshdeck.launch.torch_launch import BUILTIN_WORKLOADS
from meshdeck.services.inventory import AgentCaller, fetch_inventory

CALL_TIMEOUT_S = 60.0
T = TypeVar("T")
PROBE_SECONDS = 60
SIMULATED_VLLM = "simulated node: its agent stands in for vLLM, not checked"
SIMULATED_NO_RAY = (
    "simulated node: its agent stands in for vLLM with the mp backend only (Ray would find no GPUs); "
    "use vllm.distributed_backend: mp"
)
# Runs on the head under python3 (3.6+): listen on every port given, say so, accept and drop connections.
PORT_PROBE = """\
import select, socket, sys, time
listeners = []
for port in sys.argv[2:]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("", int(port)))
    except OSError as exc:
        print("busy %s %s" % (port, exc), flush=True)
        continue
    s.listen(64)
    listeners.append(s)
    print("listening %s" % port, flush=True)
print("probe ready", flush=True)
deadline = time.time() + float(sys.argv[1])
while time.time() < deadline:
    ready, _, _ = select.select(listeners, [], [], 0.5)
    for s in ready:
        conn, _ = s.accept()
        conn.close()
"""


def model_path(profile: Profile) -> str | None:
    """Where the model (or the user's torch script) lives on the servers; None for built-in workloads."""
    if profile.engine == "torch":
        return None if profile.torch.script in BUILTIN_WORKLOADS else profile.torch.script
    model = profile.model
    if model.startswith(("/", "~", ".")):
        return model
    # a Hugging Face id: vLLM reads it from the hub cache (HF_HOME, else ~/.cache/huggingface)
    home = profile.env.get("HF_HOME") or "~/.cache/huggingface"
    return posixpath.join(home, "hub", "models--" + model.replace("/", "--"))


def versions_python(profile: Profile) -> str:
    if profile.engine == "torch":
        return profile.torch.python
    executable = profile.vllm.executable
    return posixpath.join(posixpath.dirname(executable), "python3") if "/" in executable else "python3"


def is_vllm_cpu_build(versions: Mapping[str, Any]) -> bool:
    """Every host answered with vLLM's CPU build (`checks.versions` reports it as "<version>+cpu")."""
    found = [answer.get("vllm") for answer in versions.values() if isinstance(answer, Mapping)]
    return bool(found) and len(found) == len(versions) and all(str(v or "").endswith("+cpu") for v in found)


def _or_reason(ask: Callable[[], T]) -> T | str:
    """The answer, or the error as a one-line string (a check fails with it; pre-flight goes on)."""
    try:
        return ask()
    except Exception as exc:  # RpcError, NotConnected, timeouts, a malformed answer: that host's failed check
        return f"{type(exc).__name__}: {exc}".splitlines()[0]


def _ask(caller: AgentCaller, host: str, method: str, params: dict[str, Any] | None = None) -> Any:
    return _or_reason(lambda: caller.call(host, method, params or {}, timeout=CALL_TIMEOUT_S))


def _per_host(hosts: list[str], ask: Callable[[str], Any]) -> dict[str, Any]:
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(hosts)))) as pool:
        return dict(zip(hosts, pool.map(ask, hosts), strict=True))


def _latest_gpus(caller: AgentCaller, host: str, inventory: Inventory | str) -> list[dict[str, Any]] | str:
    """Each GPU's total and used memory: totals from the inventory, use from the newest sample."""
    if isinstance(inventory, str):
        return inventory
    gpus: dict[int, dict[str, Any]] = {
        g.index: {"index": g.index, "memory_total_bytes": g.memory_total_bytes} for g in inventory.gpus
    }
    first = _ask(caller, host, "samples.read", {"since_seq": 0, "limit": 1})
    if isinstance(first, str):
        return first
    last_seq = first.get("last_seq")
    newest = first if not isinstance(last_seq, int) else _ask(
        caller, host, "samples.read", {"since_seq": max(0, last_seq - 1), "limit": 1}
    )  # fmt: skip
    if isinstance(newest, str):
        return newest
    samples = newest.get("samples") or []
    for gpu in (samples[-1].get("gpus") or []) if samples else []:
        if isinstance(gpu, dict) and gpu.get("index") in gpus:
            gpus[gpu["index"]]["memory_used_bytes"] = gpu.get("memory_used_bytes")
            if gpu.get("memory_total_bytes"):
                gpus[gpu["index"]]["memory_total_bytes"] = gpu["memory_total_bytes"]
    return list(gpus.values())


def _clock_offset(caller: AgentCaller, host: str, clock: Callable[[], float]) -> tuple[float, float] | str:
    before = clock()
    answer = _ask(caller, host, "agent.time")
    after = clock()
    if isinstance(answer, str):
        return answer
    return float(answer["time"]) - (before + after) / 2, (after - before) / 2


def _reachability(
    caller: AgentCaller, plan: LaunchPlan, head: str, address: str, ports: list[int], python: str
) -> tuple[list[CheckResult], dict[tuple[str, int], Any]]:
    """Probe listener on `head` (the plan's head, or a disaggregated pool's node), a connect from every node to
    each port at `address`, probe stopped."""
    probe_id = f"preflight-{uuid.uuid4().hex[:8]}"
    spec = {"id": probe_id, "name": "meshdeck pre-flight port probe", "restart": "never",
            "argv": [python, "-c", PORT_PROBE, str(PROBE_SECONDS), *map(str, ports)]}  # fmt: skip
    started = _ask(caller, head, "workers.start", {"spec": spec})
    if isinstance(started, str):
        return [CheckResult("reach head", head, False, f"could not start the port probe: {started}")], {}
    try:
        deadline, text = time.monotonic() + 20.0, ""
        while "probe ready" not in text and time.monotonic() < deadline:
            logs = _ask(caller, head, "workers.logs", {"id": probe_id, "offset": 0})
            text = logs.get("data", "") if isinstance(logs, dict) else ""
            if "probe ready" not in text:
                time.sleep(0.2)
        busy = re.findall(r"^busy (\d+) (.*)$", text, re.MULTILINE)
        problems = [CheckResult("reach head", head, False, f"probe could not listen on {p}: {why}") for p, why in busy]
        if "probe ready" not in text:
            return [CheckResult("reach head", head, False, "the port probe did not start within 20 s")], {}
        listening = [p for p in ports if str(p) not in {b[0] for b in busy}]
        targets = [(host, port) for host in plan.hosts for port in listening]
        with ThreadPoolExecutor(max_workers=min(16, len(targets) or 1)) as pool:
            replies = pool.map(
                lambda t: _ask(caller, t[0], "checks.tcp_connect", {"host": address, "port": t[1],
                                                                     "timeout_s": 5}), targets)  # fmt: skip
            answers = dict(zip(targets, replies, strict=True))
        return problems, answers
    finally:
        _ask(caller, head, "workers.stop", {"id": probe_id, "grace_s": 1})


def run_preflight(
    caller: AgentCaller,
    plan: LaunchPlan,
    profile: Profile,
    *,
    inventories: Mapping[str, Inventory] | None = None,
    clock: Callable[[], float] = time.time,
) -> PreflightReport:
    """Every check on every host of `plan`; never raises for a failing host (that is a failed check).

    On simulated agents (`--simulate`, the demo) a vLLM deployment runs the agents' own stand-in: there is
    no model or vLLM to look for, and those two checks say so instead of failing (Ray, which they do not
    stand in for, fails the versions check); the others are real.
    """
    hosts = list(plan.hosts)
    results: list[CheckResult] = []
    inventory: dict[str, Inventory | str] = {h: inventories[h] for h in hosts if inventories and h in inventories}
    missing = [h for h in hosts if h not in inventory]
    if missing:
        inventory.update(_per_host(missing, lambda h: _or_reason(lambda: fetch_inventory(caller, h, CALL_TIMEOUT_S))))
    decoded = [i for i in inventory.values() if isinstance(i, Inventory)]
    simulated = profile.engine == "vllm" and any(i.simulated for i in decoded)
    path = model_path(profile)
    if simulated:
        results += [CheckResult("model files", h, True, SIMULATED_VLLM) for h in hosts]
        if plan.layout_class == "ray":
            results += [CheckResult("versions", h, False, SIMULATED_NO_RAY) for h in hosts]
        else:
            results += [CheckResult("versions", h, True, SIMULATED_VLLM) for h in hosts]
    elif path is not None:
        results += rules.model_files(path, _per_host(hosts, lambda h: _ask(caller, h, "checks.files", {"path": path})))
    python = versions_python(profile)
    found = {} if simulated else _per_host(hosts, lambda h: _ask(caller, h, "checks.versions", {"python": python}))
    has_gpus = any(i.gpus for i in decoded)
    cpu_vllm = profile.engine == "vllm" and not has_gpus and is_vllm_cpu_build(found)
    if profile.engine == "vllm":
        required = ["vllm", "torch"] + ([] if cpu_vllm else ["nccl"]) + (["ray"] if plan.layout_class == "ray" else [])
    else:  # a torch job uses NCCL on real GPUs; on simulated ones (the agent's fiction) it runs on CPU with gloo
        required = ["torch", "nccl"] if any(i.gpus for i in decoded if not i.simulated) else ["torch"]
    if not simulated:
        results += rules.versions(required, found)
    gpus = _per_host(hosts, lambda h: _latest_gpus(caller, h, inventory[h]))
    utilization = profile.vllm.gpu_memory_utilization if profile.engine == "vllm" else None
    results += rules.gpu_memory(
        profile.gpus_per_node,
        utilization,
        gpus,
        allow_cpu=profile.engine == "torch" or cpu_vllm,
        cpu_runner="vLLM's CPU build runs the workers" if cpu_vllm else "the workload runs on CPU with gloo",
    )
    # the ports each node must have free and every node must reach: the head's; a disaggregated deployment's
    # on each engine node too (API, NIXL side channel) and the router's
    purposes: dict[str, dict[int, str]] = {}
    addresses: dict[str, str] = {}
    for use in plan.ports:
        purposes.setdefault(use.host, {})[use.port] = use.purpose
        addresses[use.host] = use.address or plan.head_address
    for host, used in purposes.items():
        where = "the head" if host == plan.head_host and len(purposes) == 1 else host
        results += rules.ports_free(host, used, _ask(caller, host, "checks.ports_free", {"ports": sorted(used)}),
                                    where=where)  # fmt: skip
    if all(r.passed for r in results if r.check == "ports free"):
        probe_python = profile.torch.python if profile.engine == "torch" else "python3"
        for host, used in purposes.items():
            problems, answers = _reachability(caller, plan, host, addresses[host], sorted(used), probe_python)
            results += problems + rules.reach_head(addresses[host], answers)
    else:
        results.append(CheckResult("reach head", None, False, "not probed: a port the plan needs is taken"))
    if profile.disaggregated is not None and not cpu_vllm and not simulated:
        results += rules.rdma_devices(profile, inventory)
    results += rules.clocks(_per_host(hosts, lambda h: _clock_offset(caller, h, clock)))
    return PreflightReport(tuple(results))
