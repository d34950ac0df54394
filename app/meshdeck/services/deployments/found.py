"""Asking the agents which meshdeck workers they run: every host at once, each answer decoded where it enters.

    listings, unanswered = ask_hosts(fleet, ["gpu-a", "gpu-b"])   # host -> its WorkerRecords; host -> why not

Every worker meshdeck starts is named after its deployment (`model.worker_name`), so the agents
alone say which deployments exist, whoever launched them: the CLI, the console, an earlier session. The
deployment registry (registry.DeployService.survey) adopts what these listings show. Hosts are
asked in parallel; one that cannot be asked (unreachable, no answer, a malformed answer) is named in
`unanswered` with why (one line, escaped) and never hides or delays the others beyond the call timeout.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from meshdeck_agent.protocol import ProtocolError, WorkerRecord, worker_records_from_wire

from meshdeck.core.text import printable
from meshdeck.services.deployments.model import DeploymentSnapshot, Fleet

log = logging.getLogger(__name__)

LIST_TIMEOUT_S = 30.0
MAX_PARALLEL_HOSTS = 16


@dataclass(frozen=True)
class DeploymentSurvey:
    """What the hosts said: the deployments known after asking, and each host that could not be asked, with why."""

    deployments: list[DeploymentSnapshot]
    unanswered: dict[str, str] = field(default_factory=dict)


def ask_hosts(
    fleet: Fleet, hosts: Iterable[str], timeout_s: float = LIST_TIMEOUT_S
) -> tuple[dict[str, list[WorkerRecord]], dict[str, str]]:
    """Every host's `workers.list`, asked at once: (host -> its records, host -> why it could not be asked)."""
    names = list(dict.fromkeys(hosts))
    if not names:
        return {}, {}
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_HOSTS, len(names)), thread_name_prefix="workers.list") as pool:
        answers = dict(zip(names, pool.map(lambda host: _listing(fleet, host, timeout_s), names), strict=True))
    listings = {host: records for host, records in answers.items() if not isinstance(records, str)}
    unanswered = {host: why for host, why in answers.items() if isinstance(why, str)}
    return listings, unanswered


def _listing(fleet: Fleet, host: str, timeout_s: float) -> list[WorkerRecord] | str:
    """The host's worker records, or why they could not be read (one line, escaped)."""
    try:
        reply = fleet.call(host, "workers.list", timeout=timeout_s)
    except Exception as exc:
        log.info("%s: workers.list failed: %s", host, exc)
        return printable(str(exc) or type(exc).__name__)
    try:
        return worker_records_from_wire(reply)
    except ProtocolError as exc:
        log.warning("%s: malformed answer to workers.list: %s", host, printable(exc.message))
        return f"malformed answer to workers.list: {printable(exc.message)}"
