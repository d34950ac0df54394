"""A real vLLM deployment on agents of this machine, watched the way the console watches one — and
`meshdeck bench vllm --local`, which launches it, loads it, reads back what was stored and stops it.

    with LocalVllmDeployment(find_vllm_executable()) as run:   # two agent daemons, a store, a recorder
        snapshot = run.launch()                                # pre-flight, ordered start, vLLM's own readiness
        load = run.send_load(requests=32)                      # real completions through vLLM's API
        run.wait_stored(load)                                  # every sample up to the load's end is stored
        run.stored_max("kv_cache_usage_perc")                  # what the dashboard charts
        run.stop()

Nothing is a shortcut: the plan is `build_launch_plan`'s multi-node argv, DeployService starts it through the
agents (services.deployments.local's LocalAgents: one daemon per "node"), the agents scrape vLLM's /metrics and
parse its log, the fleet's samples go through the store's writer (HistoryRecorder) and the launch's records
through StoreRecorder, as in the console.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from meshdeck.core.errors import InputError
from meshdeck.launch.plan import LaunchPlan
from meshdeck.launch.preflight_rules import PreflightReport
from meshdeck.launch.profile import Profile
from meshdeck.services.completion_load import LoadResult, send_completions
from meshdeck.services.cpu_plan import cpu_kv_for_profile
from meshdeck.services.deployments.handoff_watch import HandoffWatch
from meshdeck.services.deployments.local import LocalAgents, distinct_free_ports, free_port
from meshdeck.services.deployments.model import DeploymentSnapshot, LaunchProgress, new_deployment_id
from meshdeck.services.deployments.records import StoreRecorder
from meshdeck.services.deployments.registry import DeployService, LaunchFailed
from meshdeck.services.deployments.targets import LOCAL_ADDRESS, prepare_launch
from meshdeck.services.history import HistoryRecorder
from meshdeck.services.preflight import run_preflight
from meshdeck.services.session_processes import left_after
from meshdeck.services.vllm_local import local_disaggregated_profile, local_vllm_profile, tiny_model_dir
from meshdeck.store.database import Database, open_database
from meshdeck.store.query import list_series, query_range
from meshdeck.store.writer import SampleWriter

GIB = 1 << 30
STORED_WAIT_S = 120.0
WORKER_METRICS = ("kv_cache_usage_perc", "num_requests_running", "generation_tokens_total", "prompt_tokens_total")


class LocalVllmDeployment:
    """Agents, store and DeployService around one real vLLM deployment of meshdeck's tiny model."""

    def __init__(
        self,
        executable: str,
        *,
        nodes: int = 2,
        tensor_parallel: int = 2,
        pipeline_parallel: int = 1,
        extra_args: Sequence[str] = (),
        model: str | None = None,
        port: int | None = None,
        whole_restarts: int | None = 0,
        disaggregated: bool = False,
    ) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="md-vllm-", dir="/tmp"))
        self.whole_restarts = whole_restarts
        self.snapshot: DeploymentSnapshot | None = None
        self.ready_s: float | None = None
        self.preflight: PreflightReport | None = None
        self._closers: list[Callable[[], None]] = []
        try:
            self.agents = LocalAgents(nodes, root=str(self.root))
            self._closers.append(self.agents.close)
            self.db: Database = open_database(self.root / "meshdeck.db")
            self._closers.append(self.db.close)
            self.writer = SampleWriter(self.db).start()
            self._closers.append(self.writer.stop)
            self._closers.append(self.agents.fleet.subscribe(HistoryRecorder(self.writer).handle))
            self.deploy = DeployService(self.agents.fleet, recorder=StoreRecorder(self.db))
            self._closers.append(self.deploy.close)
            self._closers.append(self.agents.fleet.subscribe(HandoffWatch(self.deploy).handle))
            self.profile: Profile = (
                local_disaggregated_profile(
                    self.agents.hosts,
                    executable=executable,
                    model=model or str(tiny_model_dir()),
                    ports=distinct_free_ports(6),
                )
                if disaggregated
                else local_vllm_profile(
                    self.agents.hosts,
                    executable=executable,
                    model=model or str(tiny_model_dir()),
                    port=port or free_port(),
                    master_port=free_port(),
                    tensor_parallel=tensor_parallel,
                    pipeline_parallel=pipeline_parallel,
                    extra_args=extra_args,
                )
            )
            self.deployment_id = new_deployment_id(self.profile.name)
            prepared = prepare_launch(
                self.profile,
                self.agents.fleet,
                addresses=dict.fromkeys(self.agents.hosts, LOCAL_ADDRESS),
                run_id=self.deployment_id,
            )
            self.plan: LaunchPlan = prepared.plan
            self.planned_note = prepared.planned_note
            self._inventories = prepared.inventories
        except BaseException:
            self.close()
            raise

    def run_preflight(self) -> PreflightReport:
        self.preflight = run_preflight(self.agents.fleet, self.plan, self.profile, inventories=self._inventories)
        return self.preflight

    def require_preflight(self) -> None:
        """The pre-flight, or InputError naming every failed check (the benches stop there)."""
        report = self.run_preflight()
        if not report.passed:
            raise InputError(
                "pre-flight", "; ".join(f"{r.host or 'cluster'}: {r.check}: {r.reason}" for r in report.failures)
            )

    def launch(self, progress: Callable[[LaunchProgress], None] | None = None) -> DeploymentSnapshot:
        """Start it and wait until vLLM says it is up; LaunchFailed (with vLLM's log tail) otherwise."""
        started = time.monotonic()
        try:
            self.snapshot = self.deploy.launch(
                self.plan, deployment_id=self.deployment_id, whole_restarts=self.whole_restarts, progress=progress
            )
        except LaunchFailed as failed:
            self.snapshot = failed.snapshot
            raise
        self.ready_s = time.monotonic() - started
        return self.snapshot

    def current(self) -> DeploymentSnapshot:
        return self.deploy.get(self.deployment_id)

    def send_load(
        self, requests: int, *, concurrency: int = 8, max_tokens: int = 48, keep_texts: bool = False
    ) -> LoadResult:
        if self.plan.serving_url is None:
            raise InputError("plan", "this deployment serves no API")
        return send_completions(
            self.plan.serving_url,
            self.profile.model,
            requests=requests,
            concurrency=concurrency,
            max_tokens=max_tokens,
            keep_texts=keep_texts,
        )

    def warm_up(self, attempts: int = 3) -> list[str]:
        """One completion at a time until one is answered (at most `attempts`); the failures' errors.

        A disaggregated deployment's first request makes the decode engine do NIXL's handshake with the prefill
        engine, which vLLM 0.32 gives 5 s (nixl/base_worker.py, zmq RCVTIMEO) — on two busy cores it can time out,
        and that request fails (kv_load_failure_policy "fail"); the next one handshakes again."""
        errors: list[str] = []
        for _ in range(attempts):
            load = self.send_load(1, concurrency=1, max_tokens=2)
            if load.ok:
                break
            errors += load.errors
        return errors

    def keeper_pids(self) -> list[int]:
        """The pids of this deployment's keepers (the agents' per-worker processes, from their keeper.json)."""
        pids = []
        for path in self.root.rglob("keeper.json"):
            if path.parent.name.startswith(f"{self.deployment_id}."):
                with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                    pids.append(int(json.loads(path.read_text())["keeper_pid"]))
        return pids

    def worker_pids(self) -> list[int]:
        """The pids of this deployment's running workers (each leads its own session: session_processes)."""
        pids = []
        for host in self.agents.hosts:
            listing = self.agents.fleet.call(host, "workers.list", timeout=30)["workers"]
            prefix = f"{self.deployment_id}."
            pids += [int(w["pid"]) for w in listing if str(w.get("id", "")).startswith(prefix) and w.get("pid")]
        return pids

    def stored(self, metric: str) -> list[tuple[str, str, float, int]]:
        """(host, device, max, rows) of every stored series named `metric`, over its raw samples."""
        found = []
        now = time.time()
        for series in list_series(self.db, metric=metric):
            ranges = query_range(self.db, since=now - 86400, until=now + 60, series_ids=[series.id], tier="raw")
            for stored in ranges:
                values = [m for m in stored.maximum if m == m]
                found.append((series.host, series.device, max(values, default=0.0), sum(stored.count)))
        return found

    def stored_max(self, metric: str) -> float:
        return max((peak for _, _, peak, _ in self.stored(metric)), default=0.0)

    def stored_rows(self, metrics: Sequence[str] = WORKER_METRICS) -> int:
        return sum(rows for metric in metrics for _, _, _, rows in self.stored(metric))

    def wait_stored(
        self, load: LoadResult, timeout_s: float = STORED_WAIT_S, *, generated: float | None = None
    ) -> bool:
        """Until the stored generated-token counter reaches what the load got back (every sample up to the
        load's end has come through the agent, the fleet and the writer), or `timeout_s`. `generated`: the
        count to wait for instead (a decode engine's own, which leaves prefill's first tokens out)."""
        deadline = time.monotonic() + timeout_s
        target = load.completion_tokens if generated is None else generated
        while time.monotonic() < deadline:
            self.writer.flush(timeout=10)
            if self.stored_max("generation_tokens_total") >= target:
                return True
            time.sleep(0.5)
        return False

    def stop(self, grace_s: float = 10.0) -> DeploymentSnapshot:
        self.snapshot = self.deploy.stop(self.deployment_id, grace_s=grace_s).snapshot
        return self.snapshot

    def close(self) -> None:
        """Stop what still runs, then the recorder, the writer, the database and the agents, in that order."""
        keepers: list[int] = []
        with contextlib.suppress(Exception):
            if self.snapshot is not None and not self.current().final:
                self.stop()
            keepers = self.keeper_pids()
        left_after([], within_s=15, keepers=keepers)  # each ends once its worker's process group has
        while self._closers:
            closer = self._closers.pop()
            with contextlib.suppress(Exception):
                closer()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalVllmDeployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class VllmBenchResult:
    document: dict[str, Any]  # the CLI contract's keys, exactly
    details: dict[str, Any]  # what else the run saw (the deployment id, load errors, ...), for people
    snapshot: DeploymentSnapshot
    load: LoadResult


def measured_numbers(snapshot: DeploymentSnapshot) -> dict[str, Any]:
    """The startup numbers vLLM logged (the agents' vllm_startup fields) merged over the deployment's workers:
    the KV budget from a worker's `Explicitly set (1.0/23.54) GiB for KV cache` line, the tokens from the
    engine's `CPU KV cache size: N tokens` line."""
    merged: dict[str, Any] = {}
    for numbers in snapshot.measured.values():
        for key, value in numbers.items():
            merged.setdefault(key, value)
    return merged


def run_vllm_bench(
    executable: str,
    *,
    requests: int = 32,
    concurrency: int = 8,
    progress: Callable[[LaunchProgress], None] | None = None,
) -> VllmBenchResult:
    """Launch the real TP=2 two-node deployment, send `requests` completions, stop it, report (the CLI contract)."""
    with LocalVllmDeployment(executable) as run:
        run.require_preflight()
        snapshot = run.launch(progress)
        load = run.send_load(requests, concurrency=concurrency)
        run.wait_stored(load)
        snapshot = run.current()
        measured = measured_numbers(snapshot)
        planned = cpu_kv_for_profile(run.profile)
        logged_tokens = measured.get("kv_cache_tokens")
        logged_gib = measured.get("available_kv_gib")
        document = {
            "nodes": len(run.plan.hosts),
            "tensor_parallel": run.profile.layout.tensor_parallel,
            "ready_s": round(run.ready_s or 0.0, 2),
            "requests_ok": load.ok,
            "requests_failed": load.failed,
            "kv_bytes_per_token_planned": planned.bytes_per_token,
            "kv_bytes_per_token_logged": (
                round(logged_gib * GIB / logged_tokens, 1) if logged_gib and logged_tokens else None
            ),
            "kv_tokens_planned": planned.tokens,
            "kv_tokens_logged": logged_tokens,
            "kv_usage_max": run.stored_max("kv_cache_usage_perc"),
            "metric_rows_stored": run.stored_rows(),
        }
        details = {
            "deployment": run.deployment_id,
            "running_requests_max": run.stored_max("num_requests_running"),
            "generation_tokens_stored": run.stored_max("generation_tokens_total"),
            "load_errors": load.errors[:3],
        }
        final = run.stop()
        details["stopped"] = final.state
    return VllmBenchResult(document, details, final, load)
