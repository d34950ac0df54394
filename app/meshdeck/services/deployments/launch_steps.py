"""Bringing a deployment launched here up, stage by stage, and its restart policy — steps of the deployment
registry (registry.DeployService runs them; see its module doc for the order and the policy).

They need the deployment's LaunchPlan, so they apply to deployments launched by this registry only; an
adopted one (found on the agents) is watched and stopped, never restarted from here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from meshdeck_agent.protocol import BAD_REQUEST, ProtocolError, WorkerRecord

from meshdeck.core.text import printable, printable_lines
from meshdeck.launch.plan import LaunchPlan, NodeCommand, ReadyCheck
from meshdeck.services.deployments.model import (
    LaunchFailed,
    LaunchProgress,
    WorkerSnapshot,
    describe_exit,
    worker_id,
    worker_name,
)
from meshdeck.services.deployments.state import TrackedDeployment
from meshdeck.services.log_reason import telling_line

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from meshdeck.services.deployments.model import PartStopped
    from meshdeck.services.deployments.waits import LogFollower, ReadyProbe

log = logging.getLogger(__name__)
STOP_GRACE_S = 10.0
CRASH_TAIL_LINES = 15  # of a part that died while starting, in the launch's reason
OWN_WORD_LINES = 400  # of a failed part's log, searched for its own last word (vLLM's error line)


class LaunchSteps:
    """The launch and restart steps of DeployService (a mixin: its methods run on the registry)."""

    if TYPE_CHECKING:  # what the steps use of the registry: DeployService defines them (mypy checks the overrides)
        _lock: threading.RLock
        _poll_s: float
        _logs: LogFollower
        _probe: ReadyProbe

        def _call(self, host: str, method: str, params: dict[str, Any] | None = None) -> Any: ...

        def _changed(self, deployment: TrackedDeployment) -> None: ...

        def _record(self, method: str, *args: Any) -> bool: ...

        def _record_event(
            self, deployment: TrackedDeployment, kind: str, message: str, data: Mapping[str, Any]
        ) -> None: ...

        def _tail(self, host: str, worker_id: str, lines: int) -> str: ...

        def _update_worker(self, host: str, record: WorkerRecord) -> None: ...

        def _stop_parts(
            self,
            deployment: TrackedDeployment,
            parts: list[WorkerSnapshot],
            grace_s: float,
            on_part: Callable[[PartStopped], None] | None = None,
        ) -> list[PartStopped]: ...

    def _bring_up(
        self,
        deployment: TrackedDeployment,
        progress: Callable[[LaunchProgress], None],
        cancel: threading.Event,
    ) -> None:
        plan = _plan_of(deployment)
        started: list[NodeCommand] = []
        total = len(plan.commands)

        def say(message: str) -> None:
            progress(LaunchProgress(deployment.id, message, len(started), total))

        try:
            for stage in plan.stages:
                for command in stage:
                    say(f"starting {command.name} on {command.host}")
                    try:
                        self._start(deployment, command)
                    except _Abort as abort:
                        if abort.maybe_started:
                            started.append(command)
                        raise
                    started.append(command)
                for command in stage:
                    if command.ready:
                        say(f"waiting for {command.name}: {' or '.join(c.describe() for c in command.ready)}")
                        self._wait(deployment, command.ready, [command], cancel)
                    say(f"{command.name} on {command.host} is ready")
            if plan.serving_ready:
                target = [c for c in plan.commands if c.name == plan.serving_command] or list(plan.commands)
                say(f"waiting for the deployment: {' or '.join(c.describe() for c in plan.serving_ready)}")
                self._wait(deployment, plan.serving_ready, target, cancel)
        except _Abort as abort:
            self._abort(deployment, started, abort.state, abort.reason)
            raise LaunchFailed(deployment.snapshot()) from None
        with self._lock:
            if deployment.state == "starting":
                deployment.state, deployment.reason = "running", ""
                self._changed(deployment)
        say("up" + (f": {plan.serving_url}" if plan.serving_url else ""))
        self._record_event(deployment, "running", f"{plan.name} is up", {})

    def _start(self, deployment: TrackedDeployment, command: NodeCommand) -> None:
        wid = worker_id(deployment.id, command.name)
        plan = _plan_of(deployment)
        policy = "on-failure" if plan.engine == "vllm" and not plan.restart_as_whole else "never"
        with self._lock:
            deployment.agent_restarts[wid] = 3 if policy == "on-failure" else 0
        spec = {
            "id": wid,
            "name": worker_name(deployment.id, command.stage, command.name),
            "argv": list(command.argv),
            "env": dict(command.env),
            "gpus": list(command.gpus),
            "restart": {"policy": policy, "max": 3 if policy == "on-failure" else 0, "backoff_s": 5.0},
            "metrics_url": command.metrics_url,
        }
        try:
            reply = self._call(command.host, "workers.start", {"spec": spec})
        except Exception as exc:
            raise _Abort("failed", f"{command.name} on {command.host} did not start: {printable(str(exc))}") from None
        try:
            record = WorkerRecord.from_wire(reply, "workers.start")
            if record.id != wid:
                raise ProtocolError(BAD_REQUEST, f"workers.start.id: answered for worker {record.id!r}, not {wid!r}")
        except ProtocolError as exc:  # the agent may have started it: stopped with the rest
            raise _Abort("failed", f"{command.name} on {command.host}: {_malformed(exc)}", maybe_started=True) from None
        self._update_worker(command.host, record)

    def _wait(
        self,
        deployment: TrackedDeployment,
        checks: tuple[ReadyCheck, ...],
        commands: list[NodeCommand],
        cancel: threading.Event,
    ) -> None:
        """Until one of `checks` passes for `commands[0]` (log checks count over all `commands`)."""
        plan = _plan_of(deployment)
        deadline = time.monotonic() + max(check.timeout_s for check in checks)
        ids = [worker_id(deployment.id, c.name) for c in commands]
        host = commands[0].host
        address = plan.head_address if host == plan.head_host else "127.0.0.1"
        while True:
            if cancel.is_set():
                raise _Abort("cancelled", "the launch was cancelled")
            with self._lock:
                if deployment.stopping or deployment.state in ("stopping", "stopped"):
                    raise _Abort("stopped", "stopped by request while starting")
                ended = [w for w in deployment.workers.values() if w.state in ("failed", "exited", "stopped")]
                since = [deployment.running_since.get(wid) for wid in ids]
            finished = {w.worker_id for w in ended if w.state == "exited" and w.exit_code == 0}
            if finished >= set(ids):
                return  # a job that already finished cleanly: no ready check can pass any more, none needs to
            crashed = [w for w in ended if w.worker_id not in finished]
            if crashed:
                worker = crashed[0]
                reason = describe_exit(worker.state, worker.exit_code, worker.signal, worker.reason)
                said = self._own_word(deployment, worker)
                tail = printable_lines(self._crash_tail(worker.host, worker.worker_id))
                raise _Abort(
                    "failed", f"{worker.command} on {worker.host} {reason} while starting{said}\n{tail}".rstrip()
                )
            known = [s for s in since if s is not None]
            running_since = max(known) if known and len(known) == len(since) else None
            for check in checks:
                try:
                    ok = self._probe.passed(
                        check, host=host, address=address, worker_ids=ids, running_since=running_since
                    )
                except ProtocolError as exc:  # a malformed answer is: the same agent answers the same way again
                    raise _Abort("failed", f"{commands[0].name} on {host}: {_malformed(exc)}") from None
                except Exception as exc:  # an agent hiccup is not a verdict; ask again until the deadline
                    log.debug("ready check %s on %s: %s", check.describe(), host, exc)
                    ok = False
                if ok:
                    return
            if time.monotonic() > deadline:
                waited = max(c.timeout_s for c in checks)
                raise _Abort("failed", f"not ready after {waited:g} s: {' or '.join(c.describe() for c in checks)}")
            cancel.wait(self._poll_s)

    def _abort(self, deployment: TrackedDeployment, started: list[NodeCommand], state: str, reason: str) -> None:
        with self._lock:
            deployment.stopping = True
            deployment.state, deployment.reason = state, reason
            self._changed(deployment)
            parts = [deployment.workers[worker_id(deployment.id, command.name)] for command in reversed(started)]
        self._stop_parts(deployment, parts, grace_s=5.0)
        with self._lock:
            deployment.state, deployment.reason = state, reason
            self._changed(deployment)
        self._record_event(deployment, state, reason, {})
        self._record("deployment_finished", deployment.snapshot())

    def _crash_tail(self, host: str, worker_id: str) -> str:
        """The last lines of a part that died while starting; an agent that cannot answer leaves them out."""
        try:
            return self._tail(host, worker_id, CRASH_TAIL_LINES)
        except Exception as exc:
            log.debug("no log tail of %s on %s: %s", worker_id, host, exc)
            return ""

    def _own_word(self, deployment: TrackedDeployment, worker: WorkerSnapshot) -> str:
        """`; vLLM: <its last error line>` from a failed part's log ('; log:' for other engines), or ''."""
        try:
            said = telling_line(self._tail(worker.host, worker.worker_id, OWN_WORD_LINES))
        except Exception as exc:  # the agent may be gone: the reason goes without it
            log.debug("no log of %s on %s: %s", worker.worker_id, worker.host, exc)
            return ""
        if not said:
            return ""
        return f"; vLLM: {said}" if deployment.engine == "vllm" else f"; log: {said}"

    def _react(self, deployment: TrackedDeployment, worker: WorkerSnapshot) -> Callable[[], None] | None:
        """Under the lock: the deployment's new state after a worker changed, and what to do about it."""
        states = [w.state for w in deployment.workers.values()]
        # a torch rank exiting 0 is done; a vLLM server part exiting at all (the headless node whose worker
        # died shuts its executor down "gracefully", status 0) leaves the deployment broken
        if worker.state == "exited" and worker.exit_code == 0 and deployment.engine != "vllm":
            if all(s == "exited" for s in states):
                deployment.state, deployment.reason = "completed", "every part exited 0"
                return lambda: self._finished(deployment, "completed", deployment.reason)
            return None
        if worker.state in ("failed", "exited", "restarting"):
            how = describe_exit(worker.state, worker.exit_code, worker.signal, worker.reason)
            message = f"{worker.command} on {worker.host} {how}"
            if deployment.state == "starting":
                return None  # the launch loop sees it and fails the launch with the log tail
            deployment.state, deployment.reason = "degraded", message
            if worker.state == "restarting":
                return lambda: self._record_event(deployment, "worker_restarting", message, worker.as_dict())
            if worker.state == "failed" and worker.restarts < deployment.agent_restarts.get(worker.worker_id, 0):
                # its agent restarts it (`on-failure`); the `restarting` and `running` events follow
                return lambda: self._record_event(deployment, "worker_failed", message, worker.as_dict())
            if _plan_of(deployment).restart_as_whole and deployment.whole_restarts_left > 0:
                deployment.whole_restarts_left -= 1
                return lambda: self._restart_whole(deployment, message)
            deployment.stopping = True  # the others are stopped next; then it is "failed"
            return lambda: self._fail(deployment, message, worker)
        if worker.state == "stopped":  # stopped from elsewhere (another meshdeck, `deployments stop`)
            if all(s in ("stopped", "exited", "failed") for s in states):
                deployment.state, deployment.reason = "stopped", "stopped outside this app"
                return lambda: self._finished(deployment, "stopped", deployment.reason)
            deployment.state, deployment.reason = "degraded", f"{worker.command} on {worker.host} was stopped"
            return lambda: self._record_event(deployment, "worker_stopped", deployment.reason, worker.as_dict())
        if worker.state == "running" and deployment.state == "degraded" and all(s == "running" for s in states):
            deployment.state, deployment.reason = "running", ""
            return lambda: self._record_event(deployment, "recovered", f"{worker.command} is running again", {})
        return None

    def _fail(self, deployment: TrackedDeployment, message: str, worker: WorkerSnapshot) -> None:
        message += self._own_word(deployment, worker)
        self._record_event(deployment, "worker_failed", message, worker.as_dict())
        with self._lock:
            others = [w for w in reversed(deployment.start_order()) if w.worker_id != worker.worker_id]
        self._stop_parts(deployment, others, grace_s=5.0)  # ranks whose peer died would hang in a collective
        with self._lock:
            deployment.state, deployment.reason = "failed", message
            self._changed(deployment)
        self._record("deployment_finished", deployment.snapshot())

    def _finished(self, deployment: TrackedDeployment, state: str, reason: str) -> None:
        self._record_event(deployment, state, reason, {})
        self._record("deployment_finished", deployment.snapshot())

    def _restart_whole(self, deployment: TrackedDeployment, message: str) -> None:
        self._record_event(deployment, "worker_failed", message, {})
        with self._lock:
            deployment.stopping = True
            deployment.state, deployment.reason = "restarting", f"restarting as a whole: {message}"
            deployment.whole_restarts += 1
            self._changed(deployment)
            parts = list(reversed(deployment.start_order()))
        self._record_event(deployment, "restarting", deployment.reason, {"restart": deployment.whole_restarts})
        self._stop_parts(deployment, parts, grace_s=STOP_GRACE_S)
        with self._lock:
            deployment.stopping = False
            deployment.state = "starting"
            for wid, worker in deployment.workers.items():
                deployment.workers[wid] = replace(worker, state="pending", exit_code=None, signal=None, reason="")
                deployment.running_since.pop(wid, None)
                self._logs.reset(wid)
            self._changed(deployment)
        try:
            self._bring_up(deployment, lambda _: None, threading.Event())
        except LaunchFailed:
            log.warning("%s: restart as a whole failed: %s", deployment.id, deployment.reason)


def _plan_of(deployment: TrackedDeployment) -> LaunchPlan:
    """The plan of a deployment launched here (launching and the restart policy need it)."""
    if deployment.plan is None:
        raise ValueError(f"{deployment.id} was found on the agents, not launched here: it has no plan")
    return deployment.plan


def _malformed(error: ProtocolError) -> str:
    """'malformed answer: <method>.<field>: <problem>', escaped and cut (the agent's text is in it)."""
    return f"malformed answer: {printable(error.message, 300)}"


class _Abort(Exception):
    """The launch cannot go on; `maybe_started`: the part being started may run although its start
    failed (its agent's answer was unusable), so it is stopped with the others."""

    def __init__(self, state: str, reason: str, *, maybe_started: bool = False) -> None:
        super().__init__(reason)
        self.state = state
        self.reason = reason
        self.maybe_started = maybe_started
