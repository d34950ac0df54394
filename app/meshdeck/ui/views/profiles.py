"""The profiles view: the stored deployment profiles, their versions, an editor that validates as you type,
YAML import / export, and "Launch…" (handed to the deployments view).

Validation is launch.profile's (the same the CLI and the launcher apply): the first problem is
shown under the editor with the field named, and Save stays disabled until the text is a valid
profile. A secret env value (HF_TOKEN, ...) is saved to the OS keyring and the editor shows the
keyring reference in its place; Export writes the value itself into the file chosen. Everything
shown from the store outside the editor is escaped (core.text.printable). Saving stores a new version (older ones stay readable in the versions list); every
database or file access runs as a job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from meshdeck.core.errors import InputError
from meshdeck.core.text import printable, printable_lines
from meshdeck.launch.profile import Profile
from meshdeck.services import profiles as profile_service
from meshdeck.services.files import open_output, output_target
from meshdeck.services.profiles import ProfileSummary, ProfileVersion, StoredProfile
from meshdeck.ui.context import ConsoleContext
from meshdeck.ui.jobs import Progress
from meshdeck.ui.widgets.tables import row_table

log = logging.getLogger(__name__)
Result = TypeVar("Result")
COLUMNS = ("profile", "version", "engine", "hosts", "layout", "model")


class ProfilesView(QWidget):
    launch_requested = Signal(str)  # profile name

    def __init__(self, context: ConsoleContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("profilesView")
        self.context = context
        self.summaries: list[ProfileSummary] = []
        self.current: str | None = None
        self.valid: Profile | None = None

        self.table = row_table("profilesTable", COLUMNS)
        self.table.itemSelectionChanged.connect(self._selected)
        self.versions = QListWidget()
        self.versions.setObjectName("profileVersions")
        self.versions.setMaximumHeight(140)
        self.versions.currentItemChanged.connect(self._version_chosen)
        self._validate_timer = QTimer(self)
        self._validate_timer.setSingleShot(True)
        self._validate_timer.setInterval(250)
        self._validate_timer.timeout.connect(self.validate)
        self.editor = QPlainTextEdit()
        self.editor.setObjectName("profileEditor")
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        self.editor.setFont(mono)
        self.editor.textChanged.connect(lambda: self._validate_timer.start())
        self.problem = QLabel()
        self.problem.setObjectName("fieldError")
        self.problem.setWordWrap(True)

        self.import_button = QPushButton("Import YAML…")
        self.export_button = QPushButton("Export YAML…")
        self.duplicate_button = QPushButton("Duplicate…")
        self.delete_button = QPushButton("Delete")
        self.save_button = QPushButton("Save as new version")
        self.save_button.setObjectName("saveProfileVersion")
        self.launch_button = QPushButton("Launch…")
        self.launch_button.setObjectName("launchProfile")
        self.import_button.clicked.connect(self.import_yaml)
        self.export_button.clicked.connect(self.export_yaml)
        self.duplicate_button.clicked.connect(self.duplicate)
        self.delete_button.clicked.connect(self.delete)
        self.save_button.clicked.connect(self.save)
        self.launch_button.clicked.connect(lambda: self.current and self.launch_requested.emit(self.current))
        list_buttons = QHBoxLayout()
        for button in (self.import_button, self.export_button, self.duplicate_button, self.delete_button):
            list_buttons.addWidget(button)
        list_buttons.addStretch(1)
        editor_buttons = QHBoxLayout()
        editor_buttons.addWidget(self.problem, 1)
        editor_buttons.addWidget(self.save_button)
        editor_buttons.addWidget(self.launch_button)

        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.addLayout(list_buttons)
        left_layout.addWidget(self.table, 1)
        left_layout.addWidget(QLabel("Versions"))
        left_layout.addWidget(self.versions)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.addWidget(QLabel("Profile YAML (validated as you type)"))
        right_layout.addWidget(self.editor, 1)
        right_layout.addLayout(editor_buttons)
        splitter = QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(right)
        splitter.setSizes([650, 650])
        layout = QVBoxLayout(self)
        layout.addWidget(splitter)
        self.message = QLabel()
        self.message.setObjectName("profilesMessage")
        layout.addWidget(self.message)
        self._buttons()
        self.reload()

    # ------------------------------------------------------------------ list

    def reload(self, select: str | None = None) -> None:
        db = self.context.db
        if db is None:
            return
        job = self.context.jobs.start("load profiles", lambda _p: profile_service.list_profiles(db))
        job.succeeded.connect(lambda summaries: self._loaded(summaries, select or self.current))

    def _loaded(self, summaries: list[ProfileSummary], select: str | None) -> None:
        self.summaries = list(summaries)
        self.table.setRowCount(len(self.summaries))
        for row, summary in enumerate(self.summaries):
            data = dict(summary.data)
            cells = (
                summary.name,
                f"v{summary.current_version} ({summary.versions})",
                str(data.get("engine", "")),
                ", ".join(data.get("hosts") or []),
                profile_service.layout_label(data),
                str(data.get("model", "")),
            )
            for column, text in enumerate(cells):
                self.table.setItem(row, column, QTableWidgetItem(printable(text)))
        names = [s.name for s in self.summaries]
        self.table.blockSignals(True)  # one reload of the versions below, selection changed or not
        if select in names:
            self.table.selectRow(names.index(select))
        elif names and self.current is None:
            self.table.selectRow(0)
        self.table.blockSignals(False)
        self._selected()
        self._buttons()

    def _selected(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return
        name = self.summaries[rows[0].row()].name
        self.current = name
        db = self.context.db
        assert db is not None
        job = self.context.jobs.start("profile versions", lambda _p: profile_service.profile_versions(db, name))
        job.succeeded.connect(lambda versions, name=name: self._versions_loaded(name, versions))

    def _versions_loaded(self, name: str, versions: list[ProfileVersion]) -> None:
        if name != self.current:
            return
        self.versions.clear()
        for version in sorted(versions, key=lambda v: v.version, reverse=True):
            item = QListWidgetItem(printable(f"v{version.version}  {version.note or ''}".rstrip()))
            item.setData(Qt.ItemDataRole.UserRole, version)
            self.versions.addItem(item)
        if self.versions.count():
            self.versions.setCurrentRow(0)
        self._buttons()

    def _version_chosen(self, item: QListWidgetItem | None) -> None:
        if item is not None:
            self.editor.setPlainText(item.data(Qt.ItemDataRole.UserRole).yaml)
            self.validate()

    # ------------------------------------------------------------------ editing

    def validate(self) -> Profile | None:
        """Parse the editor's text as a profile; show the first problem naming the field."""
        text = self.editor.toPlainText()
        try:
            self.valid = profile_service.parse_profile(text, "profile") if text.strip() else None
            self.problem.setText("" if self.valid else "empty")
        except InputError as exc:
            self.valid = None
            self.problem.setText(printable(str(exc)))
        self._buttons()
        return self.valid

    def _buttons(self) -> None:
        has_db = self.context.db is not None
        chosen = self.current is not None
        for button in (self.export_button, self.duplicate_button, self.delete_button, self.launch_button):
            button.setEnabled(has_db and chosen)
        self.import_button.setEnabled(has_db)
        self.save_button.setEnabled(has_db and self.valid is not None)

    def _run(self, name: str, work: Callable[[Progress], Result], done: Callable[[Result], None]) -> None:
        job = self.context.jobs.start(name, work)
        job.succeeded.connect(done)
        job.failed.connect(lambda message: self._tell(message, error=True))

    def _tell(self, text: str, error: bool = False) -> None:
        text = printable_lines(text)  # it may quote a file name or a stored profile
        self.message.setText(text)
        if error:
            QMessageBox.warning(self, "Profiles", text)

    def save(self) -> None:
        profile = self.validate()
        db = self.context.db
        if profile is None or db is None:
            return

        def saved(stored: StoredProfile) -> None:
            self._tell(f"{stored.profile.name} saved as v{stored.version.version}")
            self.reload(stored.profile.name)

        self._run("save profile", lambda _p: profile_service.save_profile(db, profile, "edited in the console"), saved)

    def import_yaml(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import profile", "", "YAML (*.yaml *.yml)")
        if path:
            self.import_file(Path(path))

    def import_file(self, path: Path, replace: bool = True) -> None:
        db = self.context.db
        assert db is not None

        def work(_progress: Progress) -> StoredProfile:
            data = profile_service.read_profile_file(str(path))
            return profile_service.import_profile(db, data, str(path), replace=replace)

        def imported(stored: StoredProfile) -> None:
            self._tell(f"imported {stored.profile.name} v{stored.version.version}")
            self.reload(stored.profile.name)

        self._run("import profile", work, imported)

    def export_yaml(self) -> None:
        if self.current is None:
            return
        path, _ = QFileDialog.getSaveFileName(self, "Export profile", f"{self.current}.yaml", "YAML (*.yaml *.yml)")
        if path:
            self.export_file(self.current, Path(path))

    def export_file(self, name: str, path: Path) -> None:
        db = self.context.db
        assert db is not None

        def work(_progress: Progress) -> tuple[str, tuple[str, ...]]:
            target = output_target(str(path), option="export")  # only the user's own symlinks are followed
            exported = profile_service.exported_profile(db, name)
            with open_output(target, private=exported.holds_secret) as stream:
                stream.write(exported.text)
            return target.destination, exported.from_keyring

        def done(answer: tuple[str, tuple[str, ...]]) -> None:
            written, from_keyring = answer
            secrets = (
                f" (with the secret values of {', '.join(from_keyring)} from the OS keyring)" if from_keyring else ""
            )
            self._tell(f"exported {name} to {written}{secrets}")

        self._run("export profile", work, done)

    def duplicate(self) -> None:
        if self.current is None:
            return
        new_name, ok = QInputDialog.getText(self, "Duplicate profile", "New name", text=f"{self.current}-copy")
        if ok and new_name.strip():
            self.duplicate_as(self.current, new_name.strip())

    def duplicate_as(self, name: str, new_name: str) -> None:
        db = self.context.db
        assert db is not None

        def duplicated(_stored: StoredProfile) -> None:
            self._tell(f"{name} duplicated as {new_name}")
            self.reload(new_name)

        self._run("duplicate profile", lambda _p: profile_service.duplicate_profile(db, name, new_name), duplicated)

    def delete(self) -> None:
        if self.current is None:
            return
        if (
            QMessageBox.question(self, "Delete profile", f"Delete {self.current} and all its versions?")
            == QMessageBox.StandardButton.Yes
        ):
            self.delete_named(self.current)

    def delete_named(self, name: str) -> None:
        db = self.context.db
        assert db is not None
        self.current = None
        self.editor.clear()
        self.versions.clear()

        def deleted(_versions: int) -> None:
            self._tell(f"{name} deleted")
            self.reload()

        self._run("delete profile", lambda _p: profile_service.delete_profile(db, name), deleted)
