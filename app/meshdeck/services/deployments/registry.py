"""The deployment registry: every deployment this process knows, launched here or found on the agents, with
its plan's numbers — and the one way to launch, list, stop and read the logs of them (no Qt; the console
calls it from jobs, `meshdeck launch` and `meshdeck deployments` from the command line).

    deploy = DeployService(fleet, recorder=StoreRecorder(db))
    unsubscribe = deploy.subscribe(bridge.post)             # DeploymentChanged / DeploymentLogLines events
    snapshot = deploy.launch_profile(profile, prepared, deployment_id=run_id)  # pre-flight, then launch
    snapshot = deploy.launch(plan, progress=on_progress, cancel=cancel_event)   # blocks until up
    survey = deploy.survey(["gpu-a", "gpu-b"])              # adopts what the agents run
    outcome = deploy.stop(snapshot.id)                      # every part, in reverse start order
    parts = deploy.logs(snapshot.id, lines=50)              # each part's last lines, escaped
    unwatch = deploy.watch_log(snapshot.id, "vllm-node0")   # its new lines as events while watched

Pre-flight: `launch_profile` runs it first (preflight_gate.py): a failed check blocks the launch unless the
caller names who overrides it, and the deployment's events record the report and the override. The console
and `meshdeck launch` launch that way; `launch` alone is the step after it (benchmarks run their own checks).

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

Adopting: a worker meshdeck started is named after its deployment, so a `worker` event or a `survey`
(`workers.list` of each host, asked at once) of a part this registry does not know adopts its deployment,
as the agent re-adopts its workers: it is watched (its state follows its parts') and can be stopped; its
name, engine, serving URL and the planner's numbers come from its stored record when there is one. The
restart policy stays with whoever launched it (re-launching needs the plan's unmasked env, which is never
stored). `survey_on_connect` surveys each host again when it (re)connects (the console).

Stopping, for any deployment: each part in reverse start order; a part that cannot be stopped is named,
the others are still stopped, and the deployment stays open (not "stopped", Stop still offered). When every
part stopped, its stored record is closed — unless a host its plan names (every host, when its plan is not
known) could not be asked in the last survey: parts may still run there.

Events: each change of a deployment is published to the subscribers as DeploymentChanged(snapshot), under
the registry's lock, so in order; a subscriber must be quick and must not call back in (the console's
bridge only queues). New text of a watched log is published as DeploymentLogLines from the registry's one
background thread (watch.py), which runs only while something is watched or a survey is pending.
"""

from __future__ import annotations

import builtins
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from meshdeck_agent.protocol import ProtocolError, WorkerRecord

from meshdeck.core.errors import InputError
from meshdeck.core.text import printable, printable_lines
from meshdeck.launch.plan import LaunchPlan
from meshdeck.launch.preflight_rules import PreflightReport
from meshdeck.launch.profile import Profile
from meshdeck.remote.events import AgentEvent, HostStateChanged
from meshdeck.remote.peer_log import PeerLog
from meshdeck.services.deployments.events import DeploymentChanged, DeploymentEvent
from meshdeck.services.deployments.found import LIST_TIMEOUT_S, DeploymentSurvey, ask_hosts
from meshdeck.services.deployments.launch_steps import STOP_GRACE_S, LaunchSteps
from meshdeck.services.deployments.model import (
    FINAL_STATES,
    DeploymentRecorder,
    DeploymentSnapshot,
    Fleet,
    LaunchFailed,
    LaunchProgress,
    PartLog,
    PartStopped,
    RecordedDeployment,
    StopOutcome,
    WorkerSnapshot,
    find,
    found_worker,
    new_deployment_id,
    shown_reason,
    summarize,
)
from meshdeck.services.deployments.preflight_gate import LaunchCancelled, PreflightBlocked, PreflightVerdict
from meshdeck.services.deployments.state import TrackedDeployment
from meshdeck.services.deployments.targets import PreparedLaunch
from meshdeck.services.deployments.waits import LogFollower, ReadyProbe, read_tail
from meshdeck.services.deployments.watch import CALL_TIMEOUT_S, BackgroundAsks, LogWatch
from meshdeck.services.preflight import run_preflight
from meshdeck.services.subscribers import Subscribers

__all__ = ["STOPPED_REASON", "STOP_GRACE_S", "DeployService", "LaunchFailed"]  # what callers import from here

log = logging.getLogger(__name__)
POLL_S = 0.3
STOPPED_REASON = "stopped by request"
LOG_LINES = 400  # a watched log's first read


class DeployService(LaunchSteps):
    # `list` below is a method: annotations in this class body say `builtins.list` for the type.

    def __init__(
        self,
        fleet: Fleet,
        *,
        recorder: DeploymentRecorder | None = None,
        poll_s: float = POLL_S,
        call_timeout_s: float = 60.0,
        survey_on_connect: bool = False,
        log_poll_s: float | None = None,
    ) -> None:
        self._fleet = fleet
        self._recorder = recorder
        self._poll_s = poll_s
        self._timeout = call_timeout_s
        self._survey_on_connect = survey_on_connect
        self._lock = threading.RLock()
        self._deployments: dict[str, TrackedDeployment] = {}
        self._by_worker: dict[tuple[str, str], str] = {}  # (host, worker id) -> deployment id
        self._unanswered: dict[str, str] = {}  # host -> why the last survey could not ask it
        self._subscribers = Subscribers[DeploymentEvent]("deployment")
        self._logs = LogFollower(self._call)
        self._probe = ReadyProbe(self._call, self._logs)
        self._noise: dict[str, PeerLog] = {}  # host -> its malformed worker events, rate-limited
        background: dict[str, Any] = {} if log_poll_s is None else {"interval_s": log_poll_s}
        self._background = BackgroundAsks(
            survey=lambda hosts: self.survey(hosts, CALL_TIMEOUT_S),
            call=lambda host, method, params, timeout: self._fleet.call(host, method, params, timeout=timeout),
            publish=self._publish,
            **background,
        )
        self._unsubscribe = fleet.subscribe(self._on_event)

    # -- subscribers -------------------------------------------------------------------------------

    def subscribe(self, callback: Callable[[DeploymentEvent], None]) -> Callable[[], None]:
        """Call `callback(event)` for every DeploymentChanged / DeploymentLogLines from now on; returns unsubscribe."""
        return self._subscribers.add(callback)

    def _publish(self, event: DeploymentEvent) -> None:
        self._subscribers.publish(event)

    def _changed(self, deployment: TrackedDeployment) -> None:
        """Under the lock: tell the subscribers, in the order the changes were made."""
        self._publish(DeploymentChanged(deployment.snapshot()))

    def raise_alarm(self, deployment_id: str, key: str, message: str) -> bool:
        """Hold `message` on the deployment (its snapshot's `alarms`, once per `key`), publish it and record it as
        an event; False when the deployment is not known or already holds that alarm."""
        with self._lock:
            deployment = self._deployments.get(deployment_id)
            if deployment is None or key in deployment.alarms or deployment.state in FINAL_STATES:
                return False
            deployment.alarms[key] = message
            self._changed(deployment)
        log.warning("%s: %s", deployment_id, message)
        self._record_event(deployment, "alarm", message, {"alarm": key})
        return True

    # -- queries -----------------------------------------------------------------------------------

    def get(self, deployment_id: str) -> DeploymentSnapshot:
        with self._lock:
            return self._deployments[deployment_id].snapshot()

    def list(self) -> list[DeploymentSnapshot]:
        """Every deployment known, launched here or adopted, oldest first."""
        with self._lock:
            snapshots = [d.snapshot() for d in self._deployments.values()]
        return sorted(snapshots, key=lambda s: s.started_at)

    def find(self, key: str) -> DeploymentSnapshot:
        """By id, or by profile name (its one active deployment, else its latest); InputError if none."""
        return find(self.list(), key)

    def close(self) -> None:
        """Stop watching (the deployments keep running on the agents)."""
        self._unsubscribe()
        self._background.close()

    # -- found on the agents -----------------------------------------------------------------------

    def survey(
        self, hosts: Iterable[str], timeout_s: float = LIST_TIMEOUT_S, *, unreachable: Mapping[str, str] | None = None
    ) -> DeploymentSurvey:
        """Ask every host at once which meshdeck workers it runs and adopt the deployments not known yet
        (their parts' states are brought up to date). Returns every deployment known, and each host that
        could not be asked with why. `unreachable`: hosts known not to answer (host -> why), not asked,
        counted as unanswered."""
        listings, unanswered = ask_hosts(self._fleet, hosts, timeout_s)
        unanswered = {**(unreachable or {}), **unanswered}
        for host, records in listings.items():
            for record in records:
                self._found(host, record)
        with self._lock:
            for host in listings:
                self._unanswered.pop(host, None)
            self._unanswered.update(unanswered)
        return DeploymentSurvey(self.list(), unanswered)

    def survey_soon(self, hosts: Iterable[str]) -> None:
        """`survey` on the registry's background thread (the console: the hosts connected at start)."""
        self._background.survey_soon(hosts)

    def _found(self, host: str, record: WorkerRecord) -> None:
        """A worker as its agent reports it: update the part, or adopt the deployment it belongs to."""
        with self._lock:
            known = (host, record.id) in self._by_worker
        if known:
            self._update_worker(host, record)
            return
        found = found_worker(host, record)
        if found is None:
            return  # not started by meshdeck
        deployment_id, worker = found
        with self._lock:
            tracked = deployment_id in self._deployments
        recorded = None if tracked else self._recorded(deployment_id)  # a store read: outside the lock
        with self._lock:
            deployment = self._deployments.get(deployment_id)
            if deployment is None:
                deployment = TrackedDeployment.adopted(deployment_id, recorded, record.started_at)
                self._deployments[deployment_id] = deployment
                log.info("%s: found on %s, adopted", deployment_id, host)
            elif not deployment.adopted_from_agents or (host, record.id) in self._by_worker:
                return  # a part a launch here does not know, or one that arrived meanwhile
            self._by_worker[(host, record.id)] = deployment_id
            deployment.add_found(worker, record.started_at)
            self._changed(deployment)

    # -- launch ------------------------------------------------------------------------------------

    def launch_profile(
        self,
        profile: Profile,
        prepared: PreparedLaunch,
        *,
        deployment_id: str,
        override: str = "",
        skip_preflight: str = "",
        report: PreflightReport | None = None,
        on_preflight: Callable[[PreflightReport], None] | None = None,
        progress: Callable[[LaunchProgress], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> DeploymentSnapshot:
        """Pre-flight, then `launch` (`prepared` was built with `run_id=deployment_id`).

        A failed check raises PreflightBlocked before anything starts, unless `override` says who chose to
        launch anyway (the console's confirmed "Launch anyway", `--force`); `skip_preflight` says who chose
        not to run it. `report`: this plan's report, run already — the one whose failures the operator
        confirmed; otherwise the checks run now and `on_preflight` hears the report. The deployment's
        events record what the launch went ahead with (preflight_gate.py)."""
        plan = prepared.plan
        if skip_preflight:
            verdict = PreflightVerdict(None, skip_preflight)
        else:
            if report is None:
                if progress is not None:
                    progress(
                        LaunchProgress(
                            deployment_id, f"pre-flight: asking {len(plan.hosts)} host(s)", 0, len(plan.commands)
                        )
                    )
                report = run_preflight(self._fleet, plan, profile, inventories=prepared.inventories)
            if on_preflight is not None:
                on_preflight(report)
            if not report.passed and not override:
                raise PreflightBlocked(deployment_id, report)
            verdict = PreflightVerdict(report, "" if report.passed else override)
        if cancel is not None and cancel.is_set():
            raise LaunchCancelled(f"{deployment_id}: cancelled during its pre-flight; nothing was started")
        return self.launch(plan, deployment_id=deployment_id, progress=progress, cancel=cancel, preflight=verdict)

    def launch(
        self,
        plan: LaunchPlan,
        *,
        deployment_id: str | None = None,
        whole_restarts: int | None = None,
        progress: Callable[[LaunchProgress], None] | None = None,
        cancel: threading.Event | None = None,
        preflight: PreflightVerdict | None = None,
    ) -> DeploymentSnapshot:
        """Start every stage in order and wait until the deployment is up; raises LaunchFailed otherwise.
        `preflight`: what `launch_profile` checked first, recorded in the deployment's events."""
        deployment_id = deployment_id or new_deployment_id(plan.name)
        deployment = TrackedDeployment.launched(plan, deployment_id, recorded=self._recorder is not None)
        if whole_restarts is None:
            whole_restarts = 2 if plan.restart_as_whole and plan.engine == "vllm" else 0
        deployment.whole_restarts_left = whole_restarts
        with self._lock:
            self._deployments[deployment.id] = deployment
            for command, worker in zip(plan.commands, deployment.workers.values(), strict=True):
                self._by_worker[(command.host, worker.worker_id)] = deployment.id
                self._logs.follow(command.host, worker.worker_id)
            self._changed(deployment)
        self._record("deployment_started", deployment.snapshot(), plan)
        if preflight is not None:
            self._record_event(deployment, *preflight.event())
        self._bring_up(deployment, progress or (lambda _: None), cancel or threading.Event())
        return deployment.snapshot()

    # -- stop --------------------------------------------------------------------------------------

    def stop(
        self,
        deployment_id: str,
        grace_s: float = STOP_GRACE_S,
        *,
        on_part: Callable[[PartStopped], None] | None = None,
    ) -> StopOutcome:
        """Stop every part in reverse start order (workers first, the head last), whoever launched it; also
        ends a launch in progress. `on_part` hears each part as it is done. See the module doc for the record."""
        with self._lock:
            deployment = self._deployments[deployment_id]
            deployment.stopping = True
            deployment.state, deployment.reason = "stopping", STOPPED_REASON
            self._changed(deployment)
            parts = list(reversed(deployment.start_order()))
        results = self._stop_parts(deployment, parts, grace_s, on_part)
        failures = [part for part in results if part.error]
        with self._lock:
            if failures:
                named = "; ".join(f"{p.worker.command} on {p.worker.host} ({p.error})" for p in failures)
                deployment.state, deployment.reason = "degraded", f"not stopped: {named}"
            elif any(part.state == "stopped" for part in results) or not results:
                deployment.state, deployment.reason = "stopped", STOPPED_REASON
            else:
                deployment.state = summarize(deployment.workers.values())
                deployment.reason = "every part had ended before the stop"
            self._changed(deployment)
            unsure = tuple(h for h in (deployment.plan_hosts or self._unanswered) if h in self._unanswered)
        closed = False
        if not failures and not unsure:
            closed = self._close_record(deployment)
        return StopOutcome(deployment.snapshot(), tuple(results), closed, unsure)

    def _stop_parts(
        self,
        deployment: TrackedDeployment,
        parts: builtins.list[WorkerSnapshot],
        grace_s: float,
        on_part: Callable[[PartStopped], None] | None = None,
    ) -> builtins.list[PartStopped]:
        """Ask each part's agent to stop it, in the order given; one that cannot be reached is named (and
        recorded as stop_failed), and the others are still stopped."""
        results = []
        for worker in parts:
            params = {"id": worker.worker_id, "grace_s": grace_s}
            try:
                reply = self._fleet.call(worker.host, "workers.stop", params, timeout=self._timeout + grace_s)
                record = WorkerRecord.from_wire(reply, "workers.stop")
                self._update_worker(worker.host, record)
                part = PartStopped(worker, record.state)
            except ProtocolError as exc:  # it may well be stopped, but its agent does not say so
                part = PartStopped(worker, None, f"malformed answer to workers.stop: {printable(exc.message, 300)}")
            except Exception as exc:  # an unreachable node: say so, keep stopping the others
                part = PartStopped(worker, None, printable(f"{type(exc).__name__}: {exc}", 300))
            if part.error:
                log.warning("stopping %s on %s: %s", worker.worker_id, worker.host, part.error)
                self._record_event(deployment, "stop_failed", f"{worker.command} on {worker.host}: {part.error}", {})
            results.append(part)
            if on_part is not None:
                on_part(part)
        return results

    def _close_record(self, deployment: TrackedDeployment) -> bool:
        """Close the stored record of a deployment whose parts were all stopped (or had ended); False when
        there is none open (launched without a store, by another machine's meshdeck, or closed already)."""
        recorded = self._recorded(deployment.id)
        if recorded is None or not recorded.open:
            return False
        with self._lock:
            state, reason = deployment.state, deployment.reason
        data = {"found_on_agents": True} if deployment.adopted_from_agents else {}
        return self._record("deployment_event", deployment.id, state, reason, data, state, reason) and self._record(
            "deployment_finished", deployment.snapshot()
        )

    # -- logs --------------------------------------------------------------------------------------

    def logs(self, deployment_id: str, command: str | None = None, lines: int = 50) -> builtins.list[PartLog]:
        """The last `lines` lines of each part's log (or of the part `command`), escaped with newlines and
        tabs kept; a part whose log cannot be read says why and never hides the others."""
        snapshot = self.get(deployment_id)
        workers = [w for w in snapshot.workers if command is None or w.command == command]
        if not workers:
            names = ", ".join(w.command for w in snapshot.workers)
            raise InputError("command", f"{command!r} is not a part of {snapshot.id} ({names})")
        parts = []
        for worker in workers:
            try:
                parts.append(PartLog(worker, printable_lines(self._tail(worker.host, worker.worker_id, lines))))
            except Exception as exc:  # this part's agent is gone or talks nonsense: say so
                why = exc.message if isinstance(exc, ProtocolError) else str(exc) or type(exc).__name__
                parts.append(PartLog(worker, "", printable(why, 300)))
        return parts

    def watch_log(
        self, deployment_id: str, command: str, lines: int = LOG_LINES, *, follow: bool = True
    ) -> Callable[[], None]:
        """Publish the last `lines` lines of a part's log as a DeploymentLogLines (reset), then (follow) its
        new text as it comes, until the returned function is called. Reads happen on the background thread."""
        snapshot = self.get(deployment_id)
        worker = next((w for w in snapshot.workers if w.command == command), None)
        if worker is None:
            raise InputError("command", f"{command!r} is not a part of {snapshot.id}")
        watch = LogWatch(snapshot.id, command, worker.host, worker.worker_id, lines, follow=follow)
        return self._background.watch(watch)

    def watched_logs(self) -> builtins.list[tuple[str, str]]:
        """(deployment, command) of every log watched now: none, no log is read."""
        return self._background.watched()

    def _tail(self, host: str, worker_id: str, lines: int) -> str:
        return read_tail(self._call, host, worker_id, lines).text

    # -- events ------------------------------------------------------------------------------------

    def _on_event(self, event: Any) -> None:
        """Fleet dispatcher thread: update state quickly; slow reactions get their own thread."""
        if isinstance(event, HostStateChanged):
            if self._survey_on_connect and event.state == "connected":
                self._background.survey_soon([event.host])  # what runs there now (events were missed meanwhile)
            return
        if not isinstance(event, AgentEvent):
            return
        if event.event == "worker":
            try:
                record = WorkerRecord.from_wire(event.data, "worker event")
            except ProtocolError as exc:
                self._peer_log(event.host).report("malformed worker event ignored", exc.message)
                return
            self._found(event.host, record)
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
                self._changed(deployment)
            if deployment.recorded:
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
            if deployment.adopted_from_agents:
                deployment.follow_parts()
                self._changed(deployment)
                return
            if new.state == "running" and old.state != "running":
                deployment.running_since[wid] = time.monotonic()
                if new.restarts > old.restarts:
                    self._logs.reset(wid)
            elif new.state != "running":
                deployment.running_since.pop(wid, None)
            if old.state == new.state or deployment.stopping or deployment.state in FINAL_STATES:
                self._changed(deployment)
                return
            reaction = self._react(deployment, new)
            self._changed(deployment)
        if reaction is not None:
            threading.Thread(target=reaction, name=f"deploy-{deployment.id}", daemon=True).start()

    # -- plumbing ----------------------------------------------------------------------------------

    def _peer_log(self, host: str) -> PeerLog:
        with self._lock:
            if host not in self._noise:
                self._noise[host] = PeerLog(log, host)
            return self._noise[host]

    def _call(self, host: str, method: str, params: dict[str, Any] | None = None) -> Any:
        return self._fleet.call(host, method, params or {}, timeout=self._timeout)

    def _recorded(self, deployment_id: str) -> RecordedDeployment | None:
        """What the store kept of it (None: no recorder, never recorded, or the store could not be read)."""
        if self._recorder is None:
            return None
        try:
            return self._recorder.recorded(deployment_id)
        except Exception:
            log.exception("reading the record of %s failed", deployment_id)
            return None

    def _record_event(self, deployment: TrackedDeployment, kind: str, message: str, data: Mapping[str, Any]) -> None:
        log.info("%s: %s: %s", deployment.id, kind, message.splitlines()[0] if message else "")
        if not deployment.recorded:
            return
        with self._lock:
            state, reason = deployment.state, deployment.reason
        self._record("deployment_event", deployment.id, kind, message, data, state, reason)

    def _record(self, method: str, *args: Any) -> bool:
        """Tell the recorder; a recording failure is logged, never allowed to break a launch or a stop."""
        if self._recorder is None:
            return False
        try:
            getattr(self._recorder, method)(*args)
        except Exception:
            log.exception("recording %s failed", method)
            return False
        return True
