"""What the deployments view says in words: the selected deployment's state line, and action messages.

Two lines with two jobs, so they cannot contradict each other:
- the state line is computed from the same snapshot as the selected row of the list and the worker
  table, at every refresh: it never says "running" about a deployment the table shows completed;
- an action message reports what the operator did last (pre-flight, launch, stop) and when, as an
  event in the past ("12:03:07 launch of demo-tiny-deepseek: up"), never as a state that could go stale.
"""

from __future__ import annotations

import time

from meshdeck.core.plural import counted
from meshdeck.services.deployments.model import DeploymentSnapshot, listed

NOTHING_SELECTED = (
    "No deployment selected: choose a profile and Launch (its pre-flight checks run first; Pre-flight only checks)."
)


def status_line(snapshot: DeploymentSnapshot | None, *, simulated: bool = False, found: bool = False) -> str:
    """`demo-x-1130073102-c8b0: running at http://… — 2 of 2 parts running (simulated vLLM)`."""
    if snapshot is None:
        return NOTHING_SELECTED
    text = f"{snapshot.id}: {snapshot.state}"
    if snapshot.serving_url and snapshot.state in ("running", "degraded"):
        text += f" at {snapshot.serving_url}"
    if snapshot.reason:
        text += f" — {snapshot.reason.splitlines()[0]}"
    workers = snapshot.workers
    if workers and not snapshot.final:
        running = sum(1 for w in workers if w.state == "running")
        text += f"; {running} of {counted(len(workers), 'part')} running"
    if snapshot.whole_restarts:
        text += f"; restarted as a whole {snapshot.whole_restarts}×"
    for alarm in snapshot.alarms:
        text += f"; ALARM: {alarm}"
    notes = [n for n, on in (("simulated vLLM", simulated), ("found on the agents", found)) if on]
    return text + (f" ({', '.join(notes)})" if notes else "")


def override_question(name: str, failures: list[str]) -> str:
    """What "Launch anyway…" asks: the failed checks, and that the override is recorded."""
    return "\n".join(
        [
            f"Launch {name} although {counted(len(failures), 'pre-flight check')} failed?",
            "",
            *listed(failures, "failed check(s): see the Pre-flight tab"),
            "",
            "A launch past these usually fails or crash-loops (GPUs or ports another deployment holds, a model "
            "missing on a node). The override is recorded in the deployment's events.",
        ]
    )


def action_message(text: str, now: float | None = None) -> str:
    """An action's outcome, stamped with the local time it happened."""
    return f"{time.strftime('%H:%M:%S', time.localtime(now if now is not None else time.time()))} {text}"
