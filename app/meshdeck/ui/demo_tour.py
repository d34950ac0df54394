"""What `meshdeck --demo` does by itself once the window is up, through the views' own actions.

1. wait until demo-a and demo-b are connected and have reported their inventories;
2. plan DeepSeek V3.2 on the detected hosts and save the best layout over both as a profile;
3. pre-flight that profile and launch it: the agents run their simulated vLLM, whose workers make
   the VRAM, KV-cache and NVLink charts move;
4. launch the tiny DeepSeek-shaped torch.distributed workload for real (gloo on CPU) on both agents
   (skipped, saying so, where no Python with torch is at hand: the packaged app carries none);
5. show an hour of history for demo-a;
6. with `--real-vllm`: launch the real vLLM (CPU build) TP=2 on cpu-a and cpu-b, send it completions
   and show the dashboard on cpu-a, labelled real.

Each step waits on the view's signals (no sleeps), and a step that fails says why in the status bar
and lets the rest go on. `finished` is emitted when the tour is done (or gave up).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer, Signal

from meshdeck.core.planner import PlanResult
from meshdeck.services import profiles as profile_service
from meshdeck.services.completion_load import send_completions
from meshdeck.services.demo import (
    DEMO_REAL_VLLM_PROFILE,
    DEMO_TORCH_PROFILE,
    DEMO_VLLM_PROFILE,
    choose_demo_layout,
    demo_layout_note,
    demo_real_vllm_profile,
    demo_torch_profile,
    demo_vllm_profile,
    torch_python,
)
from meshdeck.services.deployments.model import DeploymentSnapshot
from meshdeck.services.plan_profiles import default_mitigations, model_id_for, profile_mappings
from meshdeck.services.vllm_local import tiny_model_dir
from meshdeck.ui.jobs import Progress
from meshdeck.ui.main_window import MainWindow
from meshdeck.ui.views.dashboard.view import DashboardView
from meshdeck.ui.views.deployments.view import DeploymentsView
from meshdeck.ui.views.history.view import HistoryView
from meshdeck.ui.views.planner.view import PlannerView
from meshdeck.ui.views.profiles import ProfilesView

log = logging.getLogger(__name__)
CONNECT_TIMEOUT_MS = 120_000
REAL_LOAD_REQUESTS = 5000  # the real engine's load runs until the demo closes (or REAL_LOAD_S)
REAL_LOAD_S = 3600.0
REAL_SETTLE_MS = 120_000  # of load before the tour calls itself done (the screenshots are taken then)


def demo_first_real_host(demo: object) -> str | None:
    hosts = getattr(demo, "real_hosts", ())
    return hosts[0] if hosts else None


class DemoTour(QObject):
    step = Signal(str)  # what the tour is doing now
    finished = Signal()

    def __init__(self, window: MainWindow, hosts: tuple[str, ...]) -> None:
        super().__init__(window)
        self.window = window
        self.context = window.context
        self.hosts = hosts
        self.done = False
        self.torch_profile_saved = False
        self._deadline = QTimer(self)
        self._deadline.setSingleShot(True)
        self._deadline.timeout.connect(lambda: self._give_up("the demo hosts did not connect in time"))
        self.step.connect(lambda text: self.window.statusBar().showMessage(f"demo: {text}", 15000))
        self.step.connect(lambda text: log.info("demo: %s", text))

    def start(self) -> None:
        assert self.context.hosts is not None
        self.context.hosts.changed.connect(self._hosts_changed)
        self._deadline.start(CONNECT_TIMEOUT_MS)
        self.step.emit("starting two simulated 8×H200 agents")
        self._hosts_changed("")

    def _give_up(self, reason: str) -> None:
        log.warning("demo tour: %s", reason)
        self.step.emit(reason)
        self._finish()

    def _finish(self) -> None:
        if not self.done:
            self.done = True
            self.finished.emit()

    # 1 ------------------------------------------------------------------------------------------

    def _hosts_changed(self, _host: str) -> None:
        assert self.context.hosts is not None
        ready = self.context.hosts.connected_inventories()
        if self._deadline.isActive() and all(host in ready for host in self.hosts):
            self._deadline.stop()
            self.context.hosts.changed.disconnect(self._hosts_changed)
            self.window.show_view("topology")
            QTimer.singleShot(0, self._plan)

    # 2 ------------------------------------------------------------------------------------------

    def _plan(self) -> None:
        planner = self.window.view_of(PlannerView)
        self.step.emit("planning DeepSeek V3.2 on the detected hosts")
        planner._refresh_hosts()  # both hosts are in, ticked: plan on exactly them
        planner.form.model.setCurrentText("deepseek-v3.2")
        planner.form.disaggregated.setChecked(True)  # the chart then shows prefill/decode pools beside the layouts
        planner.planned.connect(self._planned)
        planner.plan()

    def _planned(self, result: PlanResult) -> None:
        planner = self.window.view_of(PlannerView)
        planner.planned.disconnect(self._planned)
        layout = choose_demo_layout(result, len(self.hosts))
        if layout is None:
            self._give_up("no layout fits the demo cluster")
            return
        planner.table.selectRow(result.layouts.index(layout))  # the result the planner shows
        self.window.show_view("planner")
        mitigations = default_mitigations(layout, result)  # as the planner's own save applies them
        model = model_id_for("deepseek-v3.2")
        mapping = profile_mappings(layout, result, list(self.hosts), DEMO_VLLM_PROFILE, model, mitigations=mitigations)
        vllm_profile = demo_vllm_profile(mapping[0])
        db = self.context.db
        hosts = self.hosts
        assert db is not None
        note = "; ".join([demo_layout_note(result, layout), *(m.text for m in mitigations)])
        self.step.emit(f"saving {DEMO_VLLM_PROFILE}: {note}")

        def work(_progress: object) -> list[str]:
            saved = [profile_service.save_profile(db, vllm_profile, note)]
            python = torch_python()
            if python is not None:
                torch_profile = demo_torch_profile(hosts, python)
                saved.append(profile_service.save_profile(db, torch_profile, "tiny DeepSeek, gloo on CPU"))
            return [stored.profile.name for stored in saved]

        job = self.context.jobs.start("demo profiles", work)
        job.succeeded.connect(self._profiles_saved)
        job.failed.connect(self._give_up)

    # 3 ------------------------------------------------------------------------------------------

    def _profiles_saved(self, names: list[str]) -> None:
        self.torch_profile_saved = DEMO_TORCH_PROFILE in names
        self.window.view_of(ProfilesView).reload(DEMO_VLLM_PROFILE)
        deployments = self.window.view_of(DeploymentsView)
        deployments.reload_profiles(select=DEMO_VLLM_PROFILE)
        QTimer.singleShot(500, self._preflight)

    def _preflight(self) -> None:
        deployments = self.window.view_of(DeploymentsView)
        if deployments.profile.currentText() != DEMO_VLLM_PROFILE:
            QTimer.singleShot(300, self._preflight)  # the profile list is still loading
            return
        self.window.show_view("deployments")
        self.step.emit(f"pre-flight of {DEMO_VLLM_PROFILE}")
        deployments.run_preflight()
        job = self.context.jobs.running("pre-flight")
        if job is None:
            self._give_up("the pre-flight did not start")
            return
        job.ended.connect(self._launch_vllm)

    def _launch_vllm(self) -> None:
        deployments = self.window.view_of(DeploymentsView)
        self.step.emit(f"launching {DEMO_VLLM_PROFILE} (simulated vLLM on both agents)")
        deployments.launched.connect(self._vllm_up)
        deployments.launch()
        job = self.context.jobs.running("launch")
        if job is not None:
            job.failed.connect(lambda message: self._vllm_failed())

    def _vllm_failed(self) -> None:
        """The tour goes on without it; the torch launch's own `launched` must not start the torch run again."""
        self.window.view_of(DeploymentsView).launched.disconnect(self._vllm_up)
        self._launch_torch()

    # 4 ------------------------------------------------------------------------------------------

    def _vllm_up(self, snapshot: object) -> None:
        deployments = self.window.view_of(DeploymentsView)
        deployments.launched.disconnect(self._vllm_up)
        deployments.tabs.setCurrentWidget(deployments.workers)
        QTimer.singleShot(0, self._launch_torch)

    def _launch_torch(self) -> None:
        deployments = self.window.view_of(DeploymentsView)
        if not self.torch_profile_saved:
            self.step.emit("skipping the torch run: no Python with torch here (the packaged app carries none)")
            self._history()
            return
        deployments.choose_profile(DEMO_TORCH_PROFILE)
        self.step.emit(f"launching {DEMO_TORCH_PROFILE}: a real torch.distributed run on the CPU")
        QTimer.singleShot(500, lambda: self._when_chosen(DEMO_TORCH_PROFILE, self._launch_torch_now))

    def _when_chosen(self, profile: str, then: Callable[[], None]) -> None:
        """`then()` once the deployments view shows `profile` (its list may still be loading) and no launch runs."""
        if self.window.view_of(DeploymentsView).profile.currentText() != profile or self.context.jobs.running("launch"):
            QTimer.singleShot(300, lambda: self._when_chosen(profile, then))
            return
        then()

    def _launch_torch_now(self) -> None:
        deployments = self.window.view_of(DeploymentsView)
        deployments.launch()
        job = self.context.jobs.running("launch")
        if job is None:
            self._history()
            return
        job.ended.connect(self._history)

    # 5 ------------------------------------------------------------------------------------------

    def _history(self) -> None:
        history = self.window.view_of(HistoryView)
        history.reload_hosts()
        QTimer.singleShot(3000, self._history_query)

    def _history_query(self) -> None:
        deployments = self.window.view_of(DeploymentsView)
        running = [s for s in deployments.deployments() if s.name == DEMO_VLLM_PROFILE and not s.final]
        if running:  # the deployments view shows the one that keeps running
            deployments.select(running[0].id)
        history = self.window.view_of(HistoryView)
        if history.host.count():
            history.host.setCurrentText(self.hosts[0])
            history.range.setCurrentIndex(history.range.findText("last 15 min"))
            history.query()
        self.window.show_view("dashboard")
        if self.context.demo is not None and self.context.demo.real_vllm:
            QTimer.singleShot(0, self._launch_real_vllm)
            return
        self.step.emit("done: the dashboard follows the simulated vLLM deployment")
        self._finish()

    # 6 ------------------------------------------------------------------------------------------

    def _launch_real_vllm(self) -> None:
        demo, db = self.context.demo, self.context.db
        assert demo is not None and demo.real_vllm is not None and db is not None
        profile = demo_real_vllm_profile(demo.real_vllm, demo.real_hosts)
        self.step.emit(f"launching {DEMO_REAL_VLLM_PROFILE}: a REAL vLLM (CPU build) TP=2 on cpu-a and cpu-b")

        def work(_progress: Progress) -> str:
            return profile_service.save_profile(db, profile, "the real engine: vLLM's CPU build").profile.name

        job = self.context.jobs.start("demo real profile", work)
        job.succeeded.connect(self._real_profile_saved)
        job.failed.connect(self._give_up)

    def _real_profile_saved(self, name: str) -> None:
        deployments = self.window.view_of(DeploymentsView)
        self.window.view_of(ProfilesView).reload(name)
        deployments.choose_profile(name)
        QTimer.singleShot(500, lambda: self._when_chosen(DEMO_REAL_VLLM_PROFILE, self._launch_real_vllm_now))

    def _launch_real_vllm_now(self) -> None:
        deployments = self.window.view_of(DeploymentsView)
        self.window.show_view("deployments")
        deployments.launched.connect(self._real_vllm_up)
        deployments.launch()
        job = self.context.jobs.running("launch")
        if job is not None:
            job.failed.connect(lambda message: self._give_up(f"the real vLLM did not come up: {message}"))

    def _real_vllm_up(self, snapshot: DeploymentSnapshot) -> None:
        deployments = self.window.view_of(DeploymentsView)
        deployments.launched.disconnect(self._real_vllm_up)
        url = snapshot.serving_url
        if not url:
            self._give_up("the real vLLM serves no API")
            return
        model = str(tiny_model_dir())
        self.step.emit(f"sending completions to the REAL vLLM at {url}")

        def load(progress: Progress) -> str:
            result = send_completions(url, model, requests=REAL_LOAD_REQUESTS, concurrency=8, max_tokens=400,
                                      prompt_chars=400, deadline_s=REAL_LOAD_S, stop=progress.cancelled)  # fmt: skip
            return f"{result.ok} completions answered, {result.failed} not"

        self.context.jobs.start("demo load", load, abandon_on_cancel=True)  # quitting stops the engine it loads
        self._show_real_dashboard()
        QTimer.singleShot(REAL_SETTLE_MS, self._real_done)

    def _show_real_dashboard(self) -> None:
        """The dashboard on the real engine's head (its agent scrapes vLLM's /metrics)."""
        dashboard = self.window.view_of(DashboardView)
        dashboard.refresh()  # the host list follows the samples
        index = dashboard.host_filter.findData(demo_first_real_host(self.context.demo))
        if index >= 0:
            dashboard.host_filter.setCurrentIndex(index)
        self.window.show_view("dashboard")

    def _real_done(self) -> None:
        self._show_real_dashboard()
        self.step.emit("done: the dashboard follows the REAL vLLM (CPU build) on cpu-a under load")
        self._finish()
