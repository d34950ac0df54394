"""The KV-handoff alarm of disaggregated deployments, raised from the samples the agents send.

Each decode engine of a deployment that has a router (a disaggregated plan's parts are `prefill<k>-…`,
`decode<k>-…` and `router`) is checked at every sample of its engine sum against core.kv_handoff: prompt
tokens computed beyond its requests' last partial blocks, or failed KV transfers, raise an alarm on the
deployment naming the engine (DeployService.raise_alarm: in its snapshot, the console and `deployments
list`, and a stored event), once per engine and kind. Subscribe `handle` to the fleet.
"""

from __future__ import annotations

import math
import threading

from meshdeck.core.kv_handoff import DecodeCounters, handoff_alarm, transfer_failure_alarm
from meshdeck.remote.events import FleetEvent, SamplesReceived
from meshdeck.services.deployments.registry import DeployService

ROUTER_COMMAND = "router"
DECODE_PREFIX = "decode"
NEEDED = ("prompt_tokens_computed_total", "prompt_tokens_transferred_total")
REQUESTS = ("request_success_total", "num_requests_running", "num_requests_waiting")
FAILED = "kv_transfers_failed_total"


class HandoffWatch:
    def __init__(self, deploy: DeployService) -> None:
        self._deploy = deploy
        self._lock = threading.Lock()
        self._decode_parts: dict[tuple[str, str], tuple[str, str]] = {}  # (host, worker id) -> (deployment, part)
        self._known: frozenset[tuple[str, int]] = frozenset()  # (deployment, its parts) already looked at

    def handle(self, event: FleetEvent) -> None:
        if not isinstance(event, SamplesReceived) or not len(event.batch):
            return
        batch = event.batch
        latest: dict[str, dict[str, float]] = {}  # worker id -> metric -> its last value in the batch
        for i in range(len(batch)):
            for (device, metric), value in batch.row(i):
                if device.kind == "worker" and device.engine == "" and not math.isnan(value):
                    latest.setdefault(device.name, {})[metric] = value
        if not latest:
            return
        parts = self._parts()
        for worker_id, metrics in latest.items():
            found = parts.get((event.host, worker_id))
            if found is None or not all(name in metrics for name in NEEDED):
                continue
            deployment, part = found
            counters = DecodeCounters(
                computed=metrics["prompt_tokens_computed_total"],
                transferred=metrics["prompt_tokens_transferred_total"],
                requests=sum(metrics.get(name, 0.0) for name in REQUESTS),
                failed_transfers=metrics.get(FAILED, 0.0),
            )
            if (message := handoff_alarm(part, counters)) is not None:
                self._deploy.raise_alarm(deployment, f"kv_handoff:{part}", message)
            if (message := transfer_failure_alarm(part, counters)) is not None:
                self._deploy.raise_alarm(deployment, f"kv_transfer_failed:{part}", message)

    def _parts(self) -> dict[tuple[str, str], tuple[str, str]]:
        """(host, worker id) -> (deployment, part) of every decode engine of a deployment with a router."""
        with self._lock:
            snapshots = self._deploy.list()
            seen = frozenset((s.id, len(s.workers)) for s in snapshots)
            if seen != self._known:
                self._decode_parts = {}
                for snapshot in snapshots:
                    commands = {w.command for w in snapshot.workers}
                    if ROUTER_COMMAND not in commands:
                        continue
                    for worker in snapshot.workers:
                        if worker.command.startswith(DECODE_PREFIX):
                            self._decode_parts[(worker.host, worker.worker_id)] = (snapshot.id, worker.command)
                self._known = seen
            return self._decode_parts
