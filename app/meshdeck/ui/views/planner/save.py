"""Turning the chosen layout into deployment profiles: ask a name and the model id, validate, store or export.

A torch layout also asks the script every rank runs (a path on the servers or a built-in test
workload); leaving it empty is refused like any invalid field, so a saved DeepSeek torch profile never
falls back to the tiny test model unasked.

The profiles come from `services.plan_profiles` (the same code `meshdeck plan --profile-out` uses) and
are validated by launch.profile (the checks a profile file gets), so a saved profile always launches
the layout that was planned. Storing goes through the profiles service (a new version when the name
exists), exporting writes YAML atomically (temp file + rename); both run as jobs, never on the GUI thread.

The dialog says what the save makes: for a layout of several instances ("2× TP1·DP8") one profile and
one endpoint per instance, that meshdeck starts no router, and the plan's best single-instance layout on
the same GPUs with a button that saves that one instead; it offers the settings the plan's own warnings
name (V3.2's `max_num_seqs 256`), ticked unless the operator set the value himself. A save ends with a
confirmation naming every profile written and where each serves (`confirmed`, and a message box that
does not block).

A prefill/decode-disaggregated plan (the view's "Prefill/decode pools" tab) is saved the same way, through the
same dialog (`save_disaggregated`): one profile with both pools, checked before the dialog opens (a plan whose
sub-node workers share a node between the pools is refused there, saying why), the dialog saying which hosts
each pool takes and where its router serves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QWidget,
)

from meshdeck.core.disaggregated import DisaggregatedPlan
from meshdeck.core.errors import InputError
from meshdeck.core.layout_plan import LayoutPlan
from meshdeck.core.planner import PlanResult
from meshdeck.launch.profile import Profile
from meshdeck.launch.torch_launch import BUILTIN_WORKLOADS
from meshdeck.services import profiles as profile_service
from meshdeck.services.plan_profiles import (
    Mitigation,
    default_disaggregated_name,
    default_mitigations,
    default_pools_mitigations,
    default_profile_name,
    disaggregated_profile,
    instances_notice,
    model_id_for,
    plan_mitigations,
    pools_mitigations,
    profile_endpoint,
    profiles_from_layout,
    saved_text,
    single_instance_alternative,
    write_profiles,
)
from meshdeck.ui.context import ConsoleContext
from meshdeck.ui.jobs import Progress


@dataclass(frozen=True)
class ProfileAnswer:
    """What the operator typed into the dialog; `script` is None unless the layout is planned for torch."""

    name: str
    model: str
    script: str | None = None
    mitigations: tuple[Mitigation, ...] | None = None  # the ticked ones; None: those the plan applies by default


SAVE_ALTERNATIVE = 2  # the dialog's result when the operator chose the single-instance layout instead


class ProfileDialog(QDialog):
    def __init__(
        self,
        default_name: str,
        default_model: str,
        instances: int,
        parent: QWidget | None = None,
        *,
        engine: str = "vllm",
        notice: str = "",
        alternative: str = "",
        mitigations: tuple[Mitigation, ...] = (),
        title: str = "Save layout as profile",
    ) -> None:
        """`notice`: what a layout of several instances makes (plan_profiles.instances_notice), or what a
        single profile holds (a prefill/decode plan's pools); `alternative`: the label of the single-instance
        layout a button saves instead ("" for none); `mitigations`: the settings the plan's warnings name,
        each a tick box."""
        super().__init__(parent)
        self.setObjectName("profileDialog")
        self.setWindowTitle(title)
        self.name = QLineEdit(default_name)
        self.name.setObjectName("profileName")
        self.model = QLineEdit(default_model)
        self.model.setObjectName("profileModel")
        self.model.setToolTip("Hugging Face id, or the checkpoint path on the servers")
        form = QFormLayout(self)
        form.addRow("Profile name", self.name)
        form.addRow("Model (id or path on the servers)", self.model)
        self.script: QLineEdit | None = None
        if engine == "torch":
            self.script = QLineEdit()
            self.script.setObjectName("profileScript")
            self.script.setPlaceholderText(f"/path/on/servers/train.py, or built-in: {' / '.join(BUILTIN_WORKLOADS)}")
            self.script.setToolTip(
                "What every torchrun rank runs: a Python script on the servers (it gets the layout as "
                "MESHDECK_TENSOR_PARALLEL, … env vars), or a built-in test workload"
            )
            form.addRow("Script on the servers", self.script)
        self.mitigations: list[tuple[QCheckBox, Mitigation]] = []
        for mitigation in mitigations:
            box = QCheckBox(f"Apply {mitigation.setting} {mitigation.value} (the plan warns without it)")
            box.setObjectName(f"mitigation-{mitigation.code}")
            box.setChecked(mitigation.default)
            box.setToolTip(mitigation.text)
            why = QLabel(mitigation.text)
            why.setWordWrap(True)
            why.setTextFormat(Qt.TextFormat.PlainText)
            form.addRow(box)
            form.addRow(why)
            self.mitigations.append((box, mitigation))
        self.notice: QLabel | None = None
        if instances > 1 or notice:
            self.notice = QLabel(notice or f"This layout runs {instances} independent instances: one profile each.")
            self.notice.setObjectName("instancesNotice" if instances > 1 else "saveNotice")
            self.notice.setWordWrap(True)
            self.notice.setTextFormat(Qt.TextFormat.PlainText)
            form.addRow(self.notice)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        ok = buttons.button(QDialogButtonBox.StandardButton.Ok)
        ok.setText(f"Save {instances} profiles" if instances > 1 else "Save")
        self.alternative: QPushButton | None = None
        if alternative:
            self.alternative = buttons.addButton(f"Save {alternative} instead", QDialogButtonBox.ButtonRole.ActionRole)
            self.alternative.setObjectName("saveAlternative")
            self.alternative.clicked.connect(lambda: self.done(SAVE_ALTERNATIVE))
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        self.setMinimumWidth(620)  # the wrapped notices read as a paragraph, not a column

    def answer(self) -> ProfileAnswer:
        script = self.script.text().strip() if self.script is not None else None
        ticked = tuple(m for box, m in self.mitigations if box.isChecked()) if self.mitigations else None
        return ProfileAnswer(self.name.text().strip(), self.model.text().strip(), script, ticked)


class ProfileSaver(QObject):
    saved = Signal(list)  # profile names stored or exported
    confirmed = Signal(str)  # what was saved, for the view's status line: names, files, where each serves
    failed = Signal(str)
    alternative_requested = Signal(int, bool)  # the plan's row (0-based) to save instead, to a file or not

    def __init__(self, context: ConsoleContext, parent: QWidget) -> None:
        super().__init__(parent)
        self.context = context
        self._parent = parent

    def ask(self, layout: LayoutPlan, result: PlanResult, model: str) -> ProfileAnswer | int | None:
        """The operator's answer; SAVE_ALTERNATIVE when he chose the single-instance layout instead; None: cancel."""
        alternative = single_instance_alternative(result, layout)
        dialog = ProfileDialog(
            default_profile_name(result, layout),
            model_id_for(model),
            layout.instances,
            self._parent,
            engine=result.request.engine,
            notice=instances_notice(result, layout),
            alternative="" if alternative is None else f"rank {alternative[0]}, {alternative[1].label()},",
            mitigations=plan_mitigations(layout, result),
        )
        code = dialog.exec()
        if code == SAVE_ALTERNATIVE:
            return SAVE_ALTERNATIVE
        if code != QDialog.DialogCode.Accepted:
            return None
        return dialog.answer()

    def save(
        self, layout: LayoutPlan, result: PlanResult, node_names: Sequence[str], model: str, *, to_file: bool
    ) -> None:
        answer = self.ask(layout, result, model)
        if answer == SAVE_ALTERNATIVE:
            alternative = single_instance_alternative(result, layout)
            if alternative is not None:
                self.alternative_requested.emit(alternative[0] - 1, to_file)
            return
        if not isinstance(answer, ProfileAnswer):
            return
        name = answer.name
        mitigations = answer.mitigations
        if mitigations is None:
            mitigations = default_mitigations(layout, result)
        try:
            profiles = profiles_from_layout(
                layout, result, node_names, name, answer.model, answer.script, mitigations=mitigations
            )
        except InputError as exc:
            self._tell(str(exc))
            return
        rank = next((i for i, planned in enumerate(result.layouts, start=1) if planned is layout), 0)
        said = [f"saved from the console's planner: rank {rank}, {layout.label()} on {layout.gpus} GPUs"]
        said += [mitigation.text for mitigation in mitigations]
        self._deliver(profiles, name, said, to_file=to_file)

    def ask_disaggregated(
        self, plan: DisaggregatedPlan, result: PlanResult, model: str, notice: str
    ) -> ProfileAnswer | None:
        """The operator's answer for a prefill/decode plan; None: cancel."""
        dialog = ProfileDialog(
            default_disaggregated_name(result, plan),
            model_id_for(model),
            1,
            self._parent,
            notice=notice,
            mitigations=pools_mitigations(plan, result),
            title="Save prefill/decode plan as profile",
        )
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return None
        return dialog.answer()

    def save_disaggregated(
        self, plan: DisaggregatedPlan, result: PlanResult, hosts: Sequence[str] | None, model: str, *, to_file: bool
    ) -> None:
        """Save `plan` as one profile with its pools on `hosts` (the detected hosts in order; None: `node<N>`)."""
        try:  # a plan no profile can hold is refused before the operator types anything
            planned = disaggregated_profile(plan, result, name="check", hosts=hosts, model=model_id_for(model))
        except InputError as exc:
            self._tell(str(exc))
            return
        answer = self.ask_disaggregated(plan, result, model, _pools_notice(planned))
        if answer is None:
            return
        mitigations = answer.mitigations
        if mitigations is None:
            mitigations = default_pools_mitigations(plan, result)
        try:
            profile = disaggregated_profile(
                plan, result, name=answer.name, hosts=hosts, model=answer.model, mitigations=mitigations
            )
        except InputError as exc:
            self._tell(str(exc))
            return
        rank = next((i for i, planned in enumerate(result.disaggregated, start=1) if planned is plan), 0)
        gpus = plan.prefill.gpus + plan.decode.gpus
        said = [f"saved from the console's planner: prefill/decode plan {rank}, {plan.label()} on {gpus} GPUs"]
        said += [mitigation.text for mitigation in mitigations]
        self._deliver([profile], answer.name, said, to_file=to_file)

    def _deliver(self, profiles: Sequence[Profile], name: str, said: Sequence[str], *, to_file: bool) -> None:
        """Export the profiles to the file the operator picks, or store them; `said` becomes the file's comment
        lines or the stored version's note."""
        if to_file:
            target, _ = QFileDialog.getSaveFileName(
                self._parent, "Export profile", f"{name}.yaml", "YAML (*.yaml *.yml)"
            )
            if target:
                self.export(profiles, Path(target), "".join(f"# {line}\n" for line in said))
            return
        self.store(profiles, "; ".join(said))

    def export(self, profiles: Sequence[Profile], target: Path, header: str = "") -> None:
        def work(_progress: Progress) -> list[str]:
            paths = write_profiles(profiles, target, header)
            return [f"{profile.name} → {path}" for profile, path in zip(profiles, paths, strict=True)]

        job = self.context.jobs.start("export profile", work)
        job.succeeded.connect(lambda written: self._confirm(profiles, f"Exported: {', '.join(written)}"))
        job.failed.connect(self._tell)

    def store(self, profiles: Sequence[Profile], note: str = "saved from the planner") -> None:
        db = self.context.db
        if db is None:
            self._tell("profiles cannot be stored: no database is open")
            return

        def work(_progress: Progress) -> list[str]:
            return [profile_service.save_profile(db, profile, note).profile.name for profile in profiles]

        job = self.context.jobs.start("save profile", work)
        job.succeeded.connect(lambda names: self._confirm(profiles, saved_text(names, profiles)))
        job.failed.connect(self._tell)

    def _confirm(self, profiles: Sequence[Profile], text: str) -> None:
        """Say what was written: the status line (`confirmed`) and a message box that does not block."""
        if len(profiles) > 1:
            text += f" — {len(profiles)} deployments with their own endpoints; launch each from Deployments"
        elif profiles:
            text += " — launch it from Deployments"
        self.confirmed.emit(text)
        box = QMessageBox(QMessageBox.Icon.Information, "Profile saved", text, QMessageBox.StandardButton.Ok)
        box.setParent(self._parent, box.windowFlags())
        box.setObjectName("profileSavedMessage")
        box.setTextFormat(Qt.TextFormat.PlainText)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self.saved.emit([profile.name for profile in profiles])

    def _tell(self, message: str) -> None:
        self.failed.emit(message)
        QMessageBox.warning(self._parent, "Profile not saved", message)


def _pools_notice(profile: Profile) -> str:
    """What saving a prefill/decode plan makes: one deployment, each pool's hosts, the router's address."""
    pools = profile.disaggregated
    assert pools is not None
    parts = [
        f"{role} pool: {pool.workers}× {pool.layout.label()} on {', '.join(pool.hosts)}" for role, pool in pools.pools()
    ]
    return (
        f"One profile, one deployment: {'; '.join(parts)}; KV over {pools.kv_connector.name} "
        f"({pools.kv_connector.transport}); vllm-router serves it at {profile_endpoint(profile)}."
    )
