"""The hosts view: add a host, follow its state with the reason, accept or refuse its host key.

The host-key tests use a real OpenSSH server on loopback and the real agent zipapp: the key the
dialog shows is the server's, and accepting it really connects, uploads the agent and attaches."""

from __future__ import annotations

from pathlib import Path

import pytest
from meshdeck.remote.errors import HostKeyChanged, HostKeyUnknown
from meshdeck.services.fleet import FleetService, FleetSettings
from meshdeck.store.database import open_database
from meshdeck.ui.views.hosts.dialogs import AddHostDialog, HostKeyDialog, NewHost
from meshdeck.ui.views.hosts.view import HostsView
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox
from sshd import SshdServer, generate_key


@pytest.fixture
def hosts_view(qtbot, console_context, tmp_path):
    def make(settings: FleetSettings) -> HostsView:
        console_context.db = open_database(tmp_path / "console.sqlite")
        console_context.fleet = FleetService(settings)
        console_context.fleet.subscribe(console_context.bridge.post)
        console_context.on_shutdown.append(console_context.db.close)
        console_context.on_shutdown.append(console_context.fleet.close)
        view = HostsView(console_context)
        qtbot.addWidget(view)
        view.show()
        return view

    return make


def _state(view: HostsView, name: str):
    return view.context.hosts.hosts.get(name)


def _column(view: HostsView, title: str) -> int:
    """The column headed `title` (tests find columns by what they say, not where they are)."""
    titles = [view.table.horizontalHeaderItem(c).text() for c in range(view.table.columnCount())]
    return titles.index(title)


def _row_text(view: HostsView, name: str, column: int | str) -> str:
    row = view.host_names().index(name)
    return view.table.item(row, _column(view, column) if isinstance(column, str) else column).text()


def test_adding_a_host_stores_it_and_shows_why_it_cannot_connect(qtbot, hosts_view, tmp_path) -> None:
    closed_port = 9  # discard: nothing listens on loopback
    view = hosts_view(FleetSettings(known_hosts=str(tmp_path / "known_hosts"), user_known_hosts=(), ssh_config=None))
    view.add(NewHost("gpu-x", "127.0.0.1", closed_port, None, None, None))
    qtbot.waitUntil(lambda: "gpu-x" in view.records, timeout=15000)
    qtbot.waitUntil(
        lambda: _state(view, "gpu-x") is not None and _state(view, "gpu-x").state == "disconnected", timeout=30000
    )
    assert "retrying in" in _state(view, "gpu-x").reason
    qtbot.waitUntil(lambda: "retrying in" in _row_text(view, "gpu-x", "reason"), timeout=30000)
    assert _row_text(view, "gpu-x", "reached through") == "127.0.0.1:9"

    view.table.selectRow(view.host_names().index("gpu-x"))
    assert view.disconnect_button.isEnabled() and not view.connect_button.isEnabled()
    view.disconnect_host("gpu-x")
    qtbot.waitUntil(lambda: "gpu-x" not in view.context.fleet.hosts(), timeout=30000)
    qtbot.waitUntil(lambda: view.connect_button.isEnabled(), timeout=30000)


def test_a_host_with_a_bad_target_is_refused_naming_the_field(qtbot, hosts_view, tmp_path) -> None:
    view = hosts_view(FleetSettings(known_hosts=str(tmp_path / "known_hosts"), user_known_hosts=(), ssh_config=None))
    view.add(NewHost("bad", "-oProxyCommand=touch /tmp/pwned", None, None, None, None))
    qtbot.waitUntil(lambda: view.message.text() != "", timeout=30000)
    assert "host.target" in view.message.text() or "target" in view.message.text()
    assert "bad" not in view.records and not Path("/tmp/pwned").exists()


def test_a_host_with_a_bad_simulate_spec_is_refused_naming_the_field_and_the_form(qtbot, hosts_view, tmp_path) -> None:
    view = hosts_view(FleetSettings(known_hosts=str(tmp_path / "known_hosts"), user_known_hosts=(), ssh_config=None))
    view.add(NewHost("sim", "10.0.0.7", None, None, None, "8xH200;rm -rf ~"))
    qtbot.waitUntil(lambda: view.message.text() != "", timeout=30000)
    assert "host.simulate" in view.message.text() and "COUNTxTYPE such as 8xH200" in view.message.text()
    assert "sim" not in view.records and "sim" not in view.context.fleet.hosts()


def test_the_add_host_dialog_checks_the_exporter_address_as_it_is_typed(qtbot) -> None:
    dialog = AddHostDialog([])
    qtbot.addWidget(dialog)
    dialog.target.setCurrentText("10.0.0.5")  # suggests the name "10.0.0.5"
    dialog.name.setText("gpu-a")
    ok = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
    assert ok.isEnabled() and dialog.new_host().prometheus is None  # empty: no exporter
    qtbot.keyClicks(dialog.prometheus, "10.0.0.5:99999")
    assert not ok.isEnabled() and not dialog.prometheus_error.isHidden()
    assert dialog.prometheus_error.objectName() == "fieldError"
    assert dialog.prometheus_error.text().startswith("Prometheus exporter (host gpu-a): '10.0.0.5:99999': the port")
    dialog.prometheus.setText("10.0.0.5:9400")
    assert ok.isEnabled() and dialog.prometheus_error.isHidden()
    assert dialog.new_host() == NewHost("gpu-a", "10.0.0.5", None, None, None, None, prometheus="10.0.0.5:9400")


def test_a_host_added_with_an_exporter_keeps_it_and_its_row_says_where(qtbot, hosts_view, tmp_path) -> None:
    view = hosts_view(FleetSettings(known_hosts=str(tmp_path / "known_hosts"), user_known_hosts=(), ssh_config=None))
    view.add(NewHost("gpu-x", "127.0.0.1", 9, None, None, None, prometheus="127.0.0.1:9400"))
    qtbot.waitUntil(lambda: "gpu-x" in view.records, timeout=15000)
    assert view.records["gpu-x"].prometheus == "127.0.0.1:9400"
    qtbot.waitUntil(
        lambda: _row_text(view, "gpu-x", "reached through") == "127.0.0.1:9 (exporter 127.0.0.1:9400)", timeout=30000
    )


def test_a_bad_exporter_address_that_reaches_the_service_is_refused_naming_the_field_and_host(
    qtbot, hosts_view, tmp_path
) -> None:
    view = hosts_view(FleetSettings(known_hosts=str(tmp_path / "known_hosts"), user_known_hosts=(), ssh_config=None))
    view.add(NewHost("gpu-y", "10.0.0.7", None, None, None, None, prometheus=":9400"))
    qtbot.waitUntil(lambda: view.message.text() != "", timeout=30000)
    assert view.message.text().startswith("host.prometheus: host gpu-y: ':9400': expected HOST:PORT")
    assert "gpu-y" not in view.records and "gpu-y" not in view.context.fleet.hosts()


# The tests below ask for remote_agent before hosts_view: fixtures are torn down in reverse, so the view's fleet
# is closed before remote_agent stops the agent. The other way round the fleet reconnected, and its attach
# started a new daemon that outlived the test.
def _add_sshd_host(qtbot, view: HostsView, sshd: SshdServer, key: Path) -> HostKeyUnknown | HostKeyChanged:
    view.add(NewHost("lab", "127.0.0.1", sshd.port, str(key), None, None))
    qtbot.waitUntil(lambda: _state(view, "lab") is not None and _state(view, "lab").state == "failed", timeout=60000)
    error = _state(view, "lab").error
    assert isinstance(error, HostKeyUnknown | HostKeyChanged), _state(view, "lab").reason
    view.table.selectRow(view.host_names().index("lab"))
    assert view.key_button.isEnabled()
    return error


@pytest.mark.slow
@pytest.mark.sshd
def test_an_unknown_host_key_is_shown_with_its_fingerprint_and_accepting_connects(
    qtbot, remote_agent, sshd, ssh_client_key, hosts_view
) -> None:
    view = hosts_view(remote_agent.settings)
    error = _add_sshd_host(qtbot, view, sshd, ssh_client_key)
    assert isinstance(error, HostKeyUnknown)
    dialog = HostKeyDialog("lab", error)
    qtbot.addWidget(dialog)
    assert dialog.fingerprint.text() == sshd.host_fingerprint()  # what `ssh-keygen -lf` prints
    assert dialog.accept_button is not None
    assert "ssh-ed25519" in [label.text() for label in dialog.findChildren(type(dialog.fingerprint))]
    view.decide_host_key("lab", error, accepted=True)
    qtbot.waitUntil(lambda: _state(view, "lab").state == "connected", timeout=120000)
    qtbot.waitUntil(lambda: _state(view, "lab").inventory is not None, timeout=30000)
    assert sshd.host_public_key().split()[1] in remote_agent.known_hosts.read_text()
    assert "lab" in view.records


@pytest.mark.slow
@pytest.mark.sshd
def test_refusing_an_unknown_host_key_keeps_the_host_failed_and_saves_nothing(
    qtbot, remote_agent, sshd, ssh_client_key, hosts_view, monkeypatch
) -> None:
    view = hosts_view(remote_agent.settings)
    error = _add_sshd_host(qtbot, view, sshd, ssh_client_key)
    # a failed host stays failed until asked to reconnect (test_host_supervisor): refusing must not ask,
    # neither at once nor through a background job
    asked: list[str] = []
    fleet = view.context.fleet
    monkeypatch.setattr(fleet, "retry", lambda name: asked.append(f"retry {name}"))
    monkeypatch.setattr(fleet, "accept_host_key", lambda name, _unknown: asked.append(f"accept {name}"))
    view.context.jobs.job_started.connect(lambda job: asked.append(f"job {job.name}"))
    view.decide_host_key("lab", error, accepted=False)
    assert "not accepted" in view.message.text()
    assert asked == []
    assert _state(view, "lab").state == "failed" and fleet.status("lab").state == "failed"
    assert (
        not remote_agent.known_hosts.exists()
        or sshd.host_public_key().split()[1] not in remote_agent.known_hosts.read_text()
    )


@pytest.mark.slow
@pytest.mark.sshd
def test_a_changed_host_key_shows_both_fingerprints_and_cannot_be_accepted(
    qtbot, remote_agent, sshd, ssh_client_key, hosts_view, tmp_path
) -> None:
    impostor = generate_key(tmp_path / "impostor" / "key")
    recorded = Path(str(impostor) + ".pub").read_text().split()[:2]
    remote_agent.known_hosts.write_text(f"{sshd.known_hosts_name} {' '.join(recorded)}\n")
    view = hosts_view(remote_agent.settings)
    error = _add_sshd_host(qtbot, view, sshd, ssh_client_key)
    assert isinstance(error, HostKeyChanged)
    dialog = HostKeyDialog("lab", error)
    qtbot.addWidget(dialog)
    assert dialog.accept_button is None
    assert dialog.fingerprint.text() == sshd.host_fingerprint()
    texts = " ".join(label.text() for label in dialog.findChildren(type(dialog.fingerprint)))
    assert error.expected in texts and "ssh-keygen -R" not in texts  # the command is in a read-only field
    view.decide_host_key("lab", error, accepted=True)  # even a "yes" cannot replace a known key
    assert _state(view, "lab").state == "failed"
    assert remote_agent.known_hosts.read_text().split()[2] == recorded[1]


@pytest.mark.slow
@pytest.mark.sshd
def test_test_connection_shows_the_bootstrap_steps_and_asks_about_an_unknown_key(
    qtbot, remote_agent, sshd, ssh_client_key, hosts_view, monkeypatch
) -> None:
    from meshdeck.services import hosts as host_service

    view = hosts_view(remote_agent.settings)
    host_service.add_host(view.context.db, "lab", "127.0.0.1", port=sshd.port, identity_file=str(ssh_client_key))
    view.reload_records()
    qtbot.waitUntil(lambda: "lab" in view.records, timeout=30000)
    monkeypatch.setattr(HostKeyDialog, "exec", lambda self: HostKeyDialog.DialogCode.Accepted)
    view.probe_host("lab")  # first: the key is unknown -> the dialog -> accepted and saved
    qtbot.waitUntil(lambda: "saved; test again" in view.message.text(), timeout=60000)
    steps: list[str] = []
    view.context.jobs.job_started.connect(lambda job: job.progressed.connect(lambda _f, m: steps.append(m)))
    view.probe_host("lab")
    qtbot.waitUntil(lambda: view.message.text().startswith("lab: reached"), timeout=120000)
    assert "connecting" in steps and any(step.startswith("uploading the agent") for step in steps)
    assert sshd.host_fingerprint() in view.message.text()


def test_a_host_row_follows_its_events_and_the_timer_only_ages_the_last_sample(qtbot, console_context) -> None:
    from meshdeck.remote.events import HostStateChanged
    from meshdeck.ui.views.hosts.view import AGE_COLUMN

    bridge = console_context.bridge
    view = HostsView(console_context)
    qtbot.addWidget(view)
    view.show()
    for host in ("gpu-a", "gpu-b"):
        bridge.post(HostStateChanged(host, "connecting"))
    bridge.drain()  # the bridge's tick: the rows are drawn from the signal, no timer of the view waits
    assert [_row_text(view, h, "state") for h in ("gpu-a", "gpu-b")] == ["connecting…", "connecting…"]
    redraws = view.redraws

    bridge.post(HostStateChanged("gpu-b", "failed", reason="no route to host"))
    bridge.drain()
    assert (_row_text(view, "gpu-b", "state"), _row_text(view, "gpu-b", "reason")) == ("failed", "no route to host")
    assert view.redraws == redraws  # its row only

    console_context.hosts.get("gpu-a").last_sample_ts = 1000.0
    view._age_rows(now=1003.0)  # what the timer does each second, and all it does
    assert _row_text(view, "gpu-a", AGE_COLUMN) == "3 s ago" and _row_text(view, "gpu-b", AGE_COLUMN) == "—"
    assert view._ages.isActive()

    view.hide()
    assert not view._ages.isActive()
    bridge.post(HostStateChanged("gpu-a", "connected"))
    bridge.drain()
    assert _row_text(view, "gpu-a", "state") == "connecting…" and view.redraws == redraws  # hidden: no work
    view.show()
    assert _row_text(view, "gpu-a", "state") == "connected" and view.redraws == redraws + 1


def test_a_host_waiting_to_reconnect_counts_down_with_the_age_timer(qtbot, console_context) -> None:
    from meshdeck.remote.events import HostStateChanged

    view = HostsView(console_context)
    qtbot.addWidget(view)
    view.show()
    console_context.bridge.post(
        HostStateChanged(
            "gpu-x", "disconnected", "10.0.0.7:22: connection refused (retrying in 29.3 s)", ts=1000.0, retry_at=1029.3
        )
    )
    console_context.bridge.drain()
    view._age_rows(now=1010.0)  # what the timer does each second
    assert _row_text(view, "gpu-x", "reason") == "10.0.0.7:22: connection refused (retrying in 19 s)"
    view._age_rows(now=1020.0)
    assert _row_text(view, "gpu-x", "reason") == "10.0.0.7:22: connection refused (retrying in 9 s)"
    view._age_rows(now=1030.0)
    assert _row_text(view, "gpu-x", "reason") == "10.0.0.7:22: connection refused (retrying now)"
    console_context.bridge.post(HostStateChanged("gpu-x", "connecting"))
    console_context.bridge.drain()
    view._age_rows(now=1031.0)
    assert _row_text(view, "gpu-x", "reason") == ""  # connecting again: nothing left to count


def test_a_long_reason_is_cut_whole_in_its_tooltip_and_the_details_while_the_numbers_stay_on_screen(
    qtbot, console_context, simulated_inventory
) -> None:
    from gui_helpers import connect_hosts, shown
    from meshdeck.remote.events import HostStateChanged

    view = HostsView(console_context)
    shown(qtbot, view, 1000, 500)
    connect_hosts(qtbot, console_context, {"gpu-a": simulated_inventory})
    reason = (
        "root@10.20.30.40:22 via bastion.example.org: unreachable: No route to host; checked the jump host, "
        "the key ~/.ssh/id_ed25519 and the ssh config alias gpu-a (see `ssh -vvv gpu-a`)"
    )
    console_context.bridge.post(HostStateChanged("gpu-b", "failed", reason))
    console_context.bridge.drain()
    view.refresh()
    table, header = view.table, view.table.horizontalHeader()
    room = table.viewport().width()
    for title in ("host", "state", "GPU util", "VRAM", "last sample", "GPUs"):
        column = _column(view, title)
        assert header.sectionViewportPosition(column) + header.sectionSize(column) <= room, f"{title} off screen"
    row, reason_column = view.host_names().index("gpu-b"), _column(view, "reason")
    cell = table.item(row, reason_column)
    assert cell.text() == reason and cell.toolTip() == reason
    assert header.sectionSize(reason_column) < table.fontMetrics().horizontalAdvance(reason)  # cut, with "…"
    assert header.sectionViewportPosition(reason_column) + header.sectionSize(reason_column) == room  # fills
    view.table.selectRow(row)
    assert reason in view.details.text() and view.details.isVisible()


def test_test_connection_is_in_the_toolbar_and_probes_off_the_gui_thread(
    qtbot, hosts_view, tmp_path, simulated_inventory, monkeypatch
) -> None:
    import threading

    from meshdeck.services import hosts as host_service
    from meshdeck.services.hosts import ProbeReport
    from meshdeck_agent.wire_inventory import Inventory

    view = hosts_view(FleetSettings(known_hosts=str(tmp_path / "known_hosts"), user_known_hosts=(), ssh_config=None))
    host_service.add_host(view.context.db, "lab", "10.0.0.7")
    view.reload_records()
    qtbot.waitUntil(lambda: view.table.rowCount() == 1 and "lab" in view.records, timeout=30000)
    button = view.probe_button
    assert button.isVisibleTo(view) and not button.isEnabled()  # in the toolbar; nothing selected yet
    view.table.selectRow(0)
    assert button.isEnabled()
    threads: list[threading.Thread] = []

    def probe(target: str, **options: object) -> ProbeReport:
        threads.append(threading.current_thread())
        progress = options["progress"]
        assert callable(progress)
        progress("connecting")
        return ProbeReport(
            target=target,
            route="directly",
            host_key="ssh-ed25519 SHA256:abc",
            auth="key ~/.ssh/id_ed25519",
            python="/usr/bin/python3",
            python_version="3.12.3",
            machine="x86_64",
            agent_path="~/.cache/meshdeck/agent.pyz",
            uploaded=False,
            agent_version="0.2.0",
            protocol=1,
            inventory=Inventory.from_wire(simulated_inventory),
            seconds=1.25,
        )

    monkeypatch.setattr(host_service, "probe", probe)
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.message.text().startswith("lab: reached directly"), timeout=30000)
    assert threads and threads[0] is not threading.main_thread()  # SSH never runs on the GUI thread
    assert "8 GPUs in 1.2 s" in view.message.text() or "8 GPUs in 1.3 s" in view.message.text()


def test_the_add_host_dialog_adds_a_slurm_login_node_with_its_compute_nodes_port(qtbot) -> None:
    dialog = AddHostDialog([])
    qtbot.addWidget(dialog)
    dialog.target.setCurrentText("me@login.hpc.example")
    assert not dialog.node_port.isEnabled() and dialog.new_host().scheduler is None
    dialog.slurm.setChecked(True)
    assert dialog.node_port.isEnabled()
    dialog.node_port.setValue(2222)
    assert dialog.new_host() == NewHost(
        "login.hpc.example", "me@login.hpc.example", None, None, None, None, scheduler="slurm", node_port=2222
    )
    dialog.slurm.setChecked(False)  # a port without --slurm would be meaningless: not sent
    assert dialog.new_host().node_port is None and not dialog.node_port.isEnabled()
