"""The sample sequence's epoch: kept across daemon restarts on the same state dir, new with a new one."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agent_harness import Client, InProcessAgent, short_dir, wait_for


def _read_all(client: Client) -> dict:
    return client.call("samples.read", {"since_seq": 0, "limit": 7200})


def test_a_restarted_daemon_keeps_its_epoch_and_a_replaced_state_dir_starts_a_new_one():
    directory = short_dir()
    try:
        agent = InProcessAgent(directory, "1xH100", interval_s=0.05)
        assert wait_for(lambda: agent.daemon.ring.last_seq >= 5)
        client = agent.client()
        first_epoch = client.server_hello["hello"]["epoch"]
        read = _read_all(client)
        assert read["epoch"] == first_epoch
        assert client.call("samples.subscribe", {"since_seq": read["last_seq"]})["epoch"] == first_epoch
        client.close()
        agent.stop()
        last_before = read["last_seq"]
        saved = json.loads((directory / "agent.state" / "seq.json").read_text())
        assert saved["epoch"] == first_epoch and saved["next_seq"] > last_before

        again = InProcessAgent(directory, "1xH100", interval_s=0.05)  # same state dir: the sequence continues
        assert wait_for(lambda: again.daemon.ring.last_seq >= 1)
        client = again.client()
        continued = _read_all(client)
        assert client.server_hello["hello"]["epoch"] == first_epoch == continued["epoch"]
        assert continued["first_seq"] > last_before
        client.close()
        again.stop()

        shutil.rmtree(directory / "agent.state")  # a wiped ~/.cache, a reinstalled server
        fresh = InProcessAgent(directory, "1xH100", interval_s=0.05)
        assert wait_for(lambda: fresh.daemon.ring.last_seq >= 1)
        client = fresh.client()
        restarted = _read_all(client)
        new_epoch = client.server_hello["hello"]["epoch"]
        assert new_epoch != first_epoch and restarted["epoch"] == new_epoch
        assert restarted["first_seq"] == 1
        client.close()
        fresh.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def _agent_on_seq_file(text: str) -> Iterator[tuple[InProcessAgent, Client, Path]]:
    """A daemon started on a state dir whose seq.json holds `text`; yields it, a client and the state dir."""
    directory = short_dir()
    state = directory / "agent.state"
    state.mkdir(mode=0o700)
    (state / "seq.json").write_text(text)
    agent = InProcessAgent(directory, "1xH100", interval_s=0.05)
    try:
        assert wait_for(lambda: agent.daemon.ring.last_seq >= 1)
        client = agent.client()
        yield agent, client, state
        client.close()
    finally:
        agent.stop()
        shutil.rmtree(directory, ignore_errors=True)


def test_a_seq_file_from_before_epochs_keeps_its_seq_and_gains_an_epoch():
    with _agent_on_seq_file(json.dumps({"next_seq": 5000})) as (_agent, client, state):
        assert _read_all(client)["first_seq"] == 5000
        epoch = client.server_hello["hello"]["epoch"]
        assert json.loads((state / "seq.json").read_text())["epoch"] == epoch


def test_an_unreadable_seq_file_is_a_new_sequence_under_a_new_epoch():
    with _agent_on_seq_file('{"next_seq": 77, "epoch": "abc"') as (_agent, client, _state):  # torn write
        assert _read_all(client)["first_seq"] == 1 and client.server_hello["hello"]["epoch"] != "abc"
