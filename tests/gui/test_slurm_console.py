"""The console's Slurm side against a real Slurm 22.05 (two slurmd, fake 8-GPU GRES) whose login node is a local
sshd on 127.0.0.1 with the real agent uploaded: the hosts view adds the cluster and shows its partitions; the
deployments view's Slurm tab submits a profile through the dialog (its batch script shown first, verbatim),
follows the job's states from the follower's events, reaches the agents the job started on its nodes, reads the
job's output and cancels it with scancel, leaving no process; a bad partition is refused in Slurm's words.
"""

from __future__ import annotations

import getpass
import os
import time
from pathlib import Path

import pytest
from integration.remote.remote_agent_fixtures import stop_agent
from meshdeck.launch.build import parse_layout_spec
from meshdeck.launch.slurm_batch import job_agent_dir
from meshdeck.services import profiles as profile_service
from meshdeck.services.deployments.local import free_port, workload_profile
from meshdeck.services.fleet import FleetService, FleetSettings
from meshdeck.services.slurm_local import processes_of
from meshdeck.services.slurm_service import SlurmService
from meshdeck.store.database import open_database
from meshdeck.ui.views.deployments.slurm_submit import SlurmSubmitDialog
from meshdeck.ui.views.deployments.view import DeploymentsView
from meshdeck.ui.views.hosts.dialogs import NewHost
from meshdeck.ui.views.hosts.view import HostsView
from slurm_fixtures import start_login_node

pytestmark = [pytest.mark.sshd, pytest.mark.slow, pytest.mark.timeout(300)]
SCREENSHOT_DIR_ENV = "MESHDECK_SCREENSHOT_DIR"  # where the test also saves its screenshots (to look at them)


def _cell(table, row: int, title: str) -> str:
    titles = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]
    item = table.item(row, titles.index(title))
    return item.text() if item is not None else ""


def _save(widget, tmp_path: Path, name: str) -> None:
    image = widget.grab()
    assert not image.isNull()
    for folder in filter(None, (str(tmp_path), os.environ.get(SCREENSHOT_DIR_ENV))):
        assert image.save(str(Path(folder) / name))


def test_a_profile_is_submitted_followed_and_cancelled_on_slurm_from_the_console(
    qtbot, console_context, slurm_cluster, sshd_factory, ssh_client_key, agent_pyz, tmp_path
) -> None:
    node = start_login_node(slurm_cluster, sshd_factory, ssh_client_key, tmp_path, agent_pyz)
    server, settings = node.server, node.settings
    context = console_context
    context.db = open_database(tmp_path / "console.sqlite")
    context.fleet = FleetService(settings)
    context.on_shutdown.append(context.db.close)
    context.on_shutdown.append(context.fleet.close)
    context.on_shutdown.append(lambda: stop_agent(node.agent_socket))
    context.on_shutdown.append(server.stop)
    context.on_shutdown.append(context.fleet.subscribe(context.bridge.post))
    slurm = SlurmService(context.fleet, context.db, poll_s=0.5).start()
    context.on_shutdown.append(slurm.close)
    context.use_slurm(slurm)

    # -- the hosts view: the cluster added by its login node, its partitions in the details
    hosts = HostsView(context)
    qtbot.addWidget(hosts)
    hosts.resize(1200, 500)
    hosts.show()
    user = getpass.getuser()
    hosts.add(NewHost("hpc", f"{user}@127.0.0.1", server.port, str(ssh_client_key), None, None, scheduler="slurm",
                      node_port=server.port))  # fmt: skip
    qtbot.waitUntil(lambda: "hpc" in hosts.records, timeout=15000)
    assert hosts.records["hpc"].scheduler == "slurm" and hosts.records["hpc"].node_port == server.port
    qtbot.waitUntil(lambda: context.hosts.get("hpc").state == "connected", timeout=120000)
    idle = set(processes_of(slurm_cluster.conf))  # the login node's agent carries the cluster's SLURM_CONF too
    hosts.select_host("hpc")
    hosts.refresh()
    row = hosts.host_names().index("hpc")
    assert _cell(hosts.table, row, "reached through").endswith("(Slurm login node)")
    qtbot.waitUntil(lambda: "partition debug" in hosts.details.text(), timeout=30000)
    details = hosts.details.text()
    assert "Slurm 22.05" in details and "partition debug: 2 nodes x 8 GPUs (node1,node2), up" in details
    assert "accounts and QOS: not known" in details  # no slurmdbd here: said, not guessed
    _save(hosts, tmp_path, "hosts-slurm.png")

    # -- a profile whose job runs until cancelled (its `python` sleeps), two nodes
    shim = tmp_path / "py-sleep"
    shim.write_text("#!/bin/bash\nexec sleep 600\n")
    shim.chmod(0o755)
    profile = workload_profile(
        "collectives", parse_layout_spec("dp=2"), ["a", "b"], python=str(shim), master_port=free_port()
    )
    profile_service.save_profile(context.db, profile)

    view = DeploymentsView(context)
    qtbot.addWidget(view)
    view.resize(1500, 800)
    view.show()
    qtbot.waitUntil(lambda: view.profile.currentText() == profile.name, timeout=15000)
    view.tabs.setCurrentWidget(view.slurm)
    panel = view.slurm
    assert panel.submit_button.isEnabled() and not panel.cancel_button.isEnabled()

    # -- the dialog: partitions from the cluster, a bad value named, the script shown verbatim
    dialog = SlurmSubmitDialog(context, profile.name, view)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(lambda: dialog.partition.count() == 1 and "partition debug" in dialog.cluster_info.text(),
                    timeout=30000)  # fmt: skip
    assert dialog.cluster.currentText() == "hpc" and dialog.submit_button.isEnabled()
    dialog.time_limit.setText("soon")
    dialog.preview()
    assert dialog.error.isVisible() and dialog.error.text().startswith("--time")
    dialog.partition.setCurrentText("debug")
    dialog.time_limit.setText("5")
    dialog.preview()
    qtbot.waitUntil(lambda: dialog.script.toPlainText().startswith("#!/bin/bash"), timeout=30000)
    script = dialog.script.toPlainText()
    assert "#SBATCH --partition=debug" in script and "#SBATCH --time=5" in script and "--nodes=2" in script
    submission = dialog.submission()
    assert submission.run_id == dialog.run_id
    assert view.slurm.context.slurm.script("hpc", profile, submission.options, run_id=submission.run_id) == script
    _save(dialog, tmp_path, "slurm-submit-dialog.png")
    dialog.close()

    # -- a bad partition: refused at submit, in Slurm's words, and nothing listed
    bad = SlurmSubmitDialog(context, profile.name, view)
    qtbot.addWidget(bad)
    qtbot.waitUntil(lambda: bad.submit_button.isEnabled(), timeout=30000)
    bad.partition.setCurrentText("nope")
    panel.submit(bad.submission())
    qtbot.waitUntil(lambda: "refused" in panel.message.text(), timeout=30000)
    assert "invalid partition specified: nope" in panel.message.text()
    bad.close()

    # -- submit, and follow: RUNNING on both nodes, the job's agents in the fleet
    panel.submit(submission)
    deployment = submission.run_id

    def job_row() -> int | None:
        titles = [panel.table.item(r, 0).text() for r in range(panel.table.rowCount()) if panel.table.item(r, 0)]
        return titles.index(deployment) if deployment in titles else None

    qtbot.waitUntil(lambda: job_row() is not None and _cell(panel.table, job_row(), "Slurm state") == "RUNNING",
                    timeout=60000)  # fmt: skip
    assert _cell(panel.table, job_row(), "nodes") == "node1,node2"
    assert _cell(panel.table, job_row(), "state") == "running"
    assert panel.cancel_button.isEnabled()
    qtbot.waitUntil(lambda: all(context.hosts.get(f"hpc.node{i}").state == "connected" for i in (1, 2)), timeout=90000)
    qtbot.waitUntil(lambda: "not shown" not in panel.details.text(), timeout=30000)
    details = panel.details.text()
    assert "states seen:" in details and "RUNNING" in details and "asked: job_name=" in details
    assert "partition=debug" in details and "time=5" in details
    panel.read_output()
    qtbot.waitUntil(lambda: "output of" in panel.message.text(), timeout=30000)
    assert "GLOO_SOCKET_IFNAME=lo (holds its NodeAddr 127.0.0.1)" in panel.output.toPlainText()
    _save(view, tmp_path, "deployments-slurm.png")

    # -- cancel: CANCELLED, meshdeck says stopped, the node agents leave the fleet, no process is left
    panel.cancel(deployment)
    qtbot.waitUntil(lambda: _cell(panel.table, job_row(), "Slurm state") == "CANCELLED", timeout=60000)
    assert _cell(panel.table, job_row(), "state") == "stopped" and not panel.cancel_button.isEnabled()
    assert "→ CANCELLED" in panel.details.text()
    qtbot.waitUntil(lambda: not {"hpc.node1", "hpc.node2"} & set(context.fleet.hosts()), timeout=30000)
    deadline = time.monotonic() + 20
    while (left := set(processes_of(slurm_cluster.conf)) - idle) and time.monotonic() < deadline:
        qtbot.wait(200)
    assert not left, f"processes left after scancel: {sorted(left)}"
    assert not [i for i in (0, 1) if Path(job_agent_dir(submission_job_id(panel, deployment), i)).exists()]


def submission_job_id(panel, deployment: str) -> int:
    return panel.jobs[deployment].record.job_id


def test_the_submit_dialog_without_a_cluster_says_how_to_add_one(qtbot, console_context, tmp_path) -> None:
    from meshdeck.core.errors import InputError

    context = console_context
    context.db = open_database(tmp_path / "console.sqlite")
    context.fleet = FleetService(FleetSettings(known_hosts=str(tmp_path / "kh"), user_known_hosts=(), ssh_config=None))
    context.on_shutdown.append(context.db.close)
    context.on_shutdown.append(context.fleet.close)
    context.use_slurm(SlurmService(context.fleet, context.db))
    profile = workload_profile("collectives", parse_layout_spec("dp=2"), ["a", "b"], master_port=29500)
    profile_service.save_profile(context.db, profile)
    dialog = SlurmSubmitDialog(context, profile.name)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: "No Slurm cluster" in dialog.cluster_info.text(), timeout=15000)
    assert "hosts view" in dialog.cluster_info.text() and not dialog.submit_button.isEnabled()
    with pytest.raises(InputError, match="choose a Slurm cluster"):
        dialog.submission()
