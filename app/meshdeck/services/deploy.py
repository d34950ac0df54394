"""Launch, watch and stop deployments through the agents (no Qt; the GUI calls it from a worker thread).

    deploy = DeployService(fleet, recorder=store_recorder)
    snapshot = deploy.launch(plan, progress=on_progress, cancel=cancel_event)   # blocks until up
    deploy.stop(snapshot.id)                                                    # reverse order

Launch order: stage by stage (the head first); every command of a stage must pass one of its ready
checks (port open / log line / running) before the next stage starts, then the plan's serving check
(vLLM's API up; every torch rank running). A part that dies while starting fails the launch with its
log tail and stops what was started. Cancelling stops it the same way.

Watching: the fleet's `worker` events update each part. A crash marks the deployment degraded and
is logged as an event. Restart policy: one node's vLLM restarts in place (the agent's `on-failure`);
a multi-node deployment restarts as a whole (every part stopped in reverse, then launched again) up
to `whole_restarts` times — NCCL groups cannot take a single rank back; a torch job that crashes is
reported failed and its other ranks are stopped. `log` events of kind vllm_startup are the measured
side of planned vs measured.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from meshdeck_agent.protocol import BAD_REQUEST, ProtocolError, WorkerRecord

from meshdeck.core.text import printable, printable_lines
from meshdeck.launch.plan import LaunchPlan, NodeCommand
from meshdeck.remote.events import AgentEvent
from meshdeck.remote.peer_log import PeerLog
from meshdeck.services.deploy_model import (
    FINAL_STATES,
    DeploymentRecorder,
    DeploymentSnapshot,
    Fleet,
    LaunchFailed,
    LaunchProgress,
    WorkerSnapshot,
    describe_exit,
    new_deployment_id,
    shown_reason,
    worker_id,
    worker_name,
)
from meshdeck.services.deploy_waits import LogFollower, ReadyProbe
from meshdeck.services.log_reason import telling_line

log = logging.getLogger(__name__)
POLL_S = 0.3
STOP_GRACE_S = 10.0


@dataclass
class _Deployment:
    plan: LaunchPlan
    id: str
    state: str = "starting"
    reason: str = ""
    started_at: float = field(default_factory=time.time)
    whole_restarts_left: int = 0
    whole_restarts: int = 0
    workers: dict[str, WorkerSnapshot] = field(default_factory=dict)  # worker id -> latest
    running_since: dict[str, float] = field(default_factory=dict)
    measured: dict[str, dict[str, Any]] = field(default_factory=dict)
    agent_restarts: dict[str, int] = field(default_factory=dict)  # worker id -> restarts its agent will make
    stopping: bool = False

    def snapshot(self) -> DeploymentSnapshot:
        order = {worker_id(self.id, c.name): i for i, c in enumerate(self.plan.commands)}
        return DeploymentSnapshot(
            id=self.id,
            name=self.plan.name,
            engine=self.plan.engine,
            state=self.state,
            reason=self.reason,
            workers=tuple(sorted(self.workers.values(), key=lambda w: order.get(w.worker_id, 0))),
            started_at=self.started_at,
            serving_url=self.plan.serving_url,
            whole_restarts=self.whole_restarts,
            measured={k: dict(v) for k, v in self.measured.items()},
        )


class DeployService:
    def __init__(
        self,
        fleet: Fleet,
        *,
        recorder: DeploymentRecorder | None = None,
        poll_s: float = POLL_S,
        call_timeout_s: float = 60.0,
    ) -> None:
        self._fleet = fleet
        self._recorder = recorder
        self._poll_s = poll_s
        self._timeout = call_timeout_s
        self._lock = threading.RLock()
        self._deployments: dict[str, _Deployment] = {}
        self._by_worker: dict[tuple[str, str], str] = {}  # (host, worker id) -> deployment id
        self._logs = LogFollower(self._call)
        self._probe = ReadyProbe(self._call, self._logs)
        self._noise: dict[str, PeerLog] = {}  # host -> its malformed worker events, rate-limited
        self._unsubscribe = fleet.subscribe(self._on_event)

    # -- queries -----------------------------------------------------------------------------------

    def get(self, deployment_id: str) -> DeploymentSnapshot:
        with self._lock:
            return self._deployments[deployment_id].snapshot()

    def list(self) -> list[DeploymentSnapshot]:
        with self._lock:
            return [d.snapshot() for d in self._deployments.values()]

    def logs(self, deployment_id: str, command: str, lines: int = 50) -> str:
        return self._logs.tail(worker_id(deployment_id, command), lines)

    def close(self) -> None:
        """Stop watching (the deployments keep running on the agents)."""
        self._unsubscribe()

    # -- launch ------------------------------------------------------------------------------------

    def launch(
        self,
        plan: LaunchPlan,
        *,
        deployment_id: str | None = None,
        whole_restarts: int | None = None,
        progress: Callable[[LaunchProgress], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> DeploymentSnapshot:
        """Start every stage in order and wait until the deployment is up; raises LaunchFailed otherwise."""
        deployment = _Deployment(plan=plan, id=deployment_id or new_deployment_id(plan.name))
        if whole_restarts is None:
            whole_restarts = 2 if plan.restart_as_whole and plan.engine == "vllm" else 0
        deployment.whole_restarts_left = whole_restarts
        with self._lock:
            self._deployments[deployment.id] = deployment
            for command in plan.commands:
                wid = worker_id(deployment.id, command.name)
                self._by_worker[(command.host, wid)] = deployment.id
                deployment.workers[wid] = WorkerSnapshot(command.name, command.host, wid, command.stage, "pending")
                self._logs.follow(command.host, wid)
        self._record("deployment_started", deployment.snapshot(), plan)
        self._bring_up(deployment, progress or (lambda _: None), cancel or threading.Event())
        return deployment.snapshot()

    def _bring_up(
        self, deployment: _Deployment, progress: Callable[[LaunchProgress], None], cancel: threading.Event
    ) -> None:
        plan = deployment.plan
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
        say("up" + (f": {plan.serving_url}" if plan.serving_url else ""))
        self._record_event(deployment, "running", f"{plan.name} is up", {})

    def _start(self, deployment: _Deployment, command: NodeCommand) -> None:
        wid = worker_id(deployment.id, command.name)
        policy = "on-failure" if deployment.plan.engine == "vllm" and not deployment.plan.restart_as_whole else "never"
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
            "simulate": dict(command.simulate) if command.simulate is not None else None,
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
        self, deployment: _Deployment, checks: tuple, commands: list[NodeCommand], cancel: threading.Event
    ) -> None:
        """Until one of `checks` passes for `commands[0]` (log checks count over all `commands`)."""
        plan = deployment.plan
        deadline = time.monotonic() + max(check.timeout_s for check in checks)
        ids = [worker_id(deployment.id, c.name) for c in commands]
        host = commands[0].host
        address = plan.head_address if host == plan.head_host else "127.0.0.1"
        while True:
            if cancel.is_set():
                raise _Abort("cancelled", "the launch was cancelled")
            with self._lock:
                if deployment.state in ("stopping", "stopped"):
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
                said = self._own_word(deployment, worker.worker_id)
                tail = printable_lines(self._logs.tail(worker.worker_id))
                raise _Abort(
                    "failed", f"{worker.command} on {worker.host} {reason} while starting{said}\n{tail}".rstrip()
                )
            running_since = max(since) if since and all(s is not None for s in since) else None  # type: ignore[type-var]
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

    def _abort(self, deployment: _Deployment, started: list[NodeCommand], state: str, reason: str) -> None:
        with self._lock:
            deployment.stopping = True
            deployment.state, deployment.reason = state, reason
        self._stop_commands(deployment, list(reversed(started)), grace_s=5.0)
        with self._lock:
            deployment.state, deployment.reason = state, reason
        self._record_event(deployment, state, reason, {})
        self._record("deployment_finished", deployment.snapshot())

    # -- stop --------------------------------------------------------------------------------------

    def stop(self, deployment_id: str, grace_s: float = STOP_GRACE_S) -> DeploymentSnapshot:
        """Stop every part in reverse start order (workers first, the head last). Also ends a launch in progress."""
        with self._lock:
            deployment = self._deployments[deployment_id]
            deployment.stopping = True
            deployment.state, deployment.reason = "stopping", "stopped by request"
        self._stop_commands(deployment, list(reversed(deployment.plan.commands)), grace_s)
        with self._lock:
            deployment.state = "stopped"
        self._record_event(deployment, "stopped", "stopped by request", {})
        self._record("deployment_finished", deployment.snapshot())
        return deployment.snapshot()

    def _stop_commands(self, deployment: _Deployment, commands: list[NodeCommand], grace_s: float) -> None:
        for command in commands:
            wid = worker_id(deployment.id, command.name)
            try:
                reply = self._call(command.host, "workers.stop", {"id": wid, "grace_s": grace_s})
                self._update_worker(command.host, WorkerRecord.from_wire(reply, "workers.stop"))
            except Exception as exc:  # an unreachable node, a malformed answer: say so, keep stopping the others
                why = printable(exc.message if isinstance(exc, ProtocolError) else str(exc))
                log.warning("stopping %s on %s: %s", wid, command.host, why)
                self._record_event(deployment, "stop_failed", f"{command.name} on {command.host}: {why}", {})

    # -- events ------------------------------------------------------------------------------------

    def _on_event(self, event: Any) -> None:
        """Fleet dispatcher thread: update state quickly; slow reactions get their own thread."""
        if not isinstance(event, AgentEvent):
            return
        if event.event == "worker":
            try:
                record = WorkerRecord.from_wire(event.data, "worker event")
            except ProtocolError as exc:
                self._peer_log(event.host).report("malformed worker event ignored", exc.message)
                return
            self._update_worker(event.host, record)
        elif event.event == "log" and event.data.get("kind") == "vllm_startup":
            if not isinstance(event.data.get("fields"), dict):
                self._peer_log(event.host).report("malformed vllm_startup log event ignored", "fields: not an object")
                return
            key = (event.host, str(event.data.get("worker")))
            with self._lock:
                deployment = self._deployments.get(self._by_worker.get(key, ""))
                if deployment is None:
                    return
                measured = deployment.measured.setdefault(key[1], {})
                measured.update(event.data["fields"])
                snapshot = dict(measured)
            self._record("startup_measured", deployment.id, key[1], snapshot)

    def _update_worker(self, host: str, record: WorkerRecord) -> None:
        wid = record.id
        with self._lock:
            deployment = self._deployments.get(self._by_worker.get((host, wid), ""))
            if deployment is None:
                return
            old = deployment.workers[wid]
            new = replace(
                old,
                state=record.state,
                restarts=record.restarts,
                exit_code=record.exit_code,
                signal=record.signal,
                reason=shown_reason(record),
            )
            deployment.workers[wid] = new
            if new.state == "running" and old.state != "running":
                deployment.running_since[wid] = time.monotonic()
                if new.restarts > old.restarts:
                    self._logs.reset(wid)
            elif new.state != "running":
                deployment.running_since.pop(wid, None)
            if old.state == new.state or deployment.stopping or deployment.state in FINAL_STATES:
                return
            reaction = self._react(deployment, new)
        if reaction is not None:
            threading.Thread(target=reaction, name=f"deploy-{deployment.id}", daemon=True).start()

    def _react(self, deployment: _Deployment, worker: WorkerSnapshot) -> Callable[[], None] | None:
        """Under the lock: the deployment's new state after a worker changed, and what to do about it."""
        states = [w.state for w in deployment.workers.values()]
        # a torch rank exiting 0 is done; a vLLM server part exiting at all (the headless node whose worker
        # died shuts its executor down "gracefully", status 0) leaves the deployment broken
        if worker.state == "exited" and worker.exit_code == 0 and deployment.plan.engine != "vllm":
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
            if deployment.plan.restart_as_whole and deployment.whole_restarts_left > 0:
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

    def _fail(self, deployment: _Deployment, message: str, worker: WorkerSnapshot) -> None:
        message += self._own_word(deployment, worker.worker_id)
        self._record_event(deployment, "worker_failed", message, worker.as_dict())
        others = [c for c in reversed(deployment.plan.commands) if worker_id(deployment.id, c.name) != worker.worker_id]
        self._stop_commands(deployment, others, grace_s=5.0)  # ranks whose peer died would hang in a collective
        with self._lock:
            deployment.state, deployment.reason = "failed", message
        self._record("deployment_finished", deployment.snapshot())

    def _finished(self, deployment: _Deployment, state: str, reason: str) -> None:
        self._record_event(deployment, state, reason, {})
        self._record("deployment_finished", deployment.snapshot())

    def _restart_whole(self, deployment: _Deployment, message: str) -> None:
        self._record_event(deployment, "worker_failed", message, {})
        with self._lock:
            deployment.stopping = True
            deployment.state, deployment.reason = "restarting", f"restarting as a whole: {message}"
            deployment.whole_restarts += 1
        self._record_event(deployment, "restarting", deployment.reason, {"restart": deployment.whole_restarts})
        self._stop_commands(deployment, list(reversed(deployment.plan.commands)), grace_s=STOP_GRACE_S)
        with self._lock:
            deployment.stopping = False
            deployment.state = "starting"
            for wid, worker in deployment.workers.items():
                deployment.workers[wid] = replace(worker, state="pending", exit_code=None, signal=None, reason="")
                deployment.running_since.pop(wid, None)
                self._logs.reset(wid)
        try:
            self._bring_up(deployment, lambda _: None, threading.Event())
        except LaunchFailed:
            log.warning("%s: restart as a whole failed: %s", deployment.id, deployment.reason)

    # -- plumbing ----------------------------------------------------------------------------------

    def _own_word(self, deployment: _Deployment, wid: str) -> str:
        """`; vLLM: <its last error line>` from a failed part's log ('log:' for other engines), or ''."""
        said = telling_line(self._logs.recent(wid))
        if not said:
            return ""
        return f"; vLLM: {said}" if deployment.plan.engine == "vllm" else f"; log: {said}"

    def _peer_log(self, host: str) -> PeerLog:
        with self._lock:
            if host not in self._noise:
                self._noise[host] = PeerLog(log, host)
            return self._noise[host]

    def _call(self, host: str, method: str, params: dict[str, Any] | None = None) -> Any:
        return self._fleet.call(host, method, params or {}, timeout=self._timeout)

    def _record_event(self, deployment: _Deployment, kind: str, message: str, data: Mapping[str, Any]) -> None:
        log.info("%s: %s: %s", deployment.id, kind, message.splitlines()[0] if message else "")
        with self._lock:
            state, reason = deployment.state, deployment.reason
        self._record("deployment_event", deployment.id, kind, message, data, state, reason)

    def _record(self, method: str, *args: Any) -> None:
        """Tell the recorder; a recording failure is logged, never allowed to break a launch or a stop."""
        if self._recorder is None:
            return
        try:
            getattr(self._recorder, method)(*args)
        except Exception:
            log.exception("recording %s failed", method)


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
