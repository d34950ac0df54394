"""Turning the chosen layout into deployment profiles: ask a name and the model id, validate, store or export.

A torch layout also asks the script every rank runs (a path on the servers or a built-in test
workload); leaving it empty is refused like any invalid field, so a saved DeepSeek torch profile never
falls back to the tiny test model unasked.

The profiles come from `services.plan_profiles` (the same code `meshdeck plan --profile-out` uses) and
are validated by launch.profile (the checks a profile file gets), so a saved profile always launches
the layout that was planned. Storing goes through the profiles service (a new version when the name
exists), exporting writes YAML atomically (temp file + rename); both run as jobs, never on the GUI thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QWidget,
)

from meshdeck.core.errors import InputError
from meshdeck.core.layout_plan import LayoutPlan
from meshdeck.core.planner import PlanResult
from meshdeck.launch.profile import Profile
from meshdeck.launch.torch_launch import BUILTIN_WORKLOADS
from meshdeck.services import profiles as profile_service
from meshdeck.services.plan_profiles import default_profile_name, model_id_for, profiles_from_layout, write_profiles
from meshdeck.ui.context import ConsoleContext
from meshdeck.ui.jobs import Progress


@dataclass(frozen=True)
class ProfileAnswer:
    """What the operator typed into the dialog; `script` is None unless the layout is planned for torch."""

    name: str
    model: str
    script: str | None = None


class ProfileDialog(QDialog):
    def __init__(
        self,
        default_name: str,
        default_model: str,
        instances: int,
        parent: QWidget | None = None,
        *,
        engine: str = "vllm",
    ) -> None:
        super().__init__(parent)
        self.setObjectName("profileDialog")
        self.setWindowTitle("Save layout as profile")
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
        if instances > 1:
            form.addRow(QLabel(f"This layout runs {instances} independent instances: one profile each (-1, -2, …)."))
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def answer(self) -> ProfileAnswer:
        script = self.script.text().strip() if self.script is not None else None
        return ProfileAnswer(self.name.text().strip(), self.model.text().strip(), script)


class ProfileSaver(QObject):
    saved = Signal(list)  # profile names stored or exported
    failed = Signal(str)

    def __init__(self, context: ConsoleContext, parent: QWidget) -> None:
        super().__init__(parent)
        self.context = context
        self._parent = parent

    def ask(self, layout: LayoutPlan, result: PlanResult, model: str) -> ProfileAnswer | None:
        dialog = ProfileDialog(
            default_profile_name(result, layout),
            model_id_for(model),
            layout.instances,
            self._parent,
            engine=result.request.engine,
        )
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return None
        return dialog.answer()

    def save(
        self, layout: LayoutPlan, result: PlanResult, node_names: Sequence[str], model: str, *, to_file: bool
    ) -> None:
        answer = self.ask(layout, result, model)
        if answer is None:
            return
        name = answer.name
        try:
            profiles = profiles_from_layout(layout, result, node_names, name, answer.model, answer.script)
        except InputError as exc:
            self._tell(str(exc))
            return
        if to_file:
            target, _ = QFileDialog.getSaveFileName(
                self._parent, "Export profile", f"{name}.yaml", "YAML (*.yaml *.yml)"
            )
            if target:
                self.export(profiles, Path(target))
            return
        self.store(profiles)

    def export(self, profiles: Sequence[Profile], target: Path) -> None:
        def work(_progress: Progress) -> list[str]:
            write_profiles(profiles, target)
            return [profile.name for profile in profiles]

        job = self.context.jobs.start("export profile", work)
        job.succeeded.connect(self.saved.emit)
        job.failed.connect(self._tell)

    def store(self, profiles: Sequence[Profile]) -> None:
        db = self.context.db
        if db is None:
            self._tell("profiles cannot be stored: no database is open")
            return

        def work(_progress: Progress) -> list[str]:
            note = "saved from the planner"
            return [profile_service.save_profile(db, profile, note).profile.name for profile in profiles]

        job = self.context.jobs.start("save profile", work)
        job.succeeded.connect(self.saved.emit)
        job.failed.connect(self._tell)

    def _tell(self, message: str) -> None:
        self.failed.emit(message)
        QMessageBox.warning(self._parent, "Profile not saved", message)
