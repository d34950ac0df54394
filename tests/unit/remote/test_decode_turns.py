"""A fleet's supervisors decode and flatten samples a few at a time (supervisor.DECODE_TURNS): the rest sleep
on the turns instead of competing for the GIL with the store writer and the GUI thread."""

from __future__ import annotations

import random
import threading
import time

from meshdeck.remote import sample_batch, supervisor
from meshdeck.remote.sample_gate import SampleGate
from meshdeck.remote.supervisor import Backoff, HostSupervisor, SupervisorSettings
from remote_fake_agent import FakeConnector, Recorder

HOSTS = 8
SAMPLES = 6
SETTINGS = SupervisorSettings(hello_timeout_s=10, call_timeout_s=10, stall_after_s=60, backoff=Backoff(0.05, 2, 0.2))


class _Concurrency:
    """Counts the threads inside the wrapped calls at once; each call lingers so that overlaps happen."""

    def __init__(self) -> None:
        self.inside = 0
        self.most = 0
        self.calls = 0
        self._lock = threading.Lock()

    def wrap(self, function):
        def wrapped(*args, **kwargs):
            with self._lock:
                self.inside += 1
                self.calls += 1
                self.most = max(self.most, self.inside)
            try:
                time.sleep(0.02)  # asleep: without the turns every host's thread would be in here
                return function(*args, **kwargs)
            finally:
                with self._lock:
                    self.inside -= 1

        return wrapped


def test_no_more_than_the_decode_turns_decode_or_flatten_at_once_and_every_sample_arrives(monkeypatch):
    decoding, flattening = _Concurrency(), _Concurrency()
    monkeypatch.setattr(SampleGate, "decode", decoding.wrap(SampleGate.decode))
    monkeypatch.setattr(
        "meshdeck.remote.sample_gate.batch_from_samples", flattening.wrap(sample_batch.batch_from_samples)
    )
    recorder = Recorder()
    connectors = [FakeConnector() for _ in range(HOSTS)]
    supervisors = [
        HostSupervisor(f"gpu-{i}", connector, recorder, settings=SETTINGS, rng=random.Random(i))
        for i, connector in enumerate(connectors)
    ]
    try:
        for one in supervisors:
            one.start()
        recorder.wait_for(lambda: all(one.state == "connected" for one in supervisors))
        for connector in connectors:
            assert connector.agent.subscribed.wait(10)
        for _ in range(SAMPLES):  # every host's sample at once, as a fleet sampling on one clock
            for connector in connectors:
                connector.agent.emit(1)
        recorder.wait_for(lambda: all(recorder.seqs(f"gpu-{i}") == list(range(1, SAMPLES + 1)) for i in range(HOSTS)))
    finally:
        for one in supervisors:
            one.stop()
        for connector in connectors:
            connector.close_all()
    assert decoding.calls >= HOSTS and flattening.calls >= HOSTS
    assert 1 <= decoding.most <= supervisor.DECODE_TURNS < HOSTS
    assert 1 <= flattening.most <= supervisor.DECODE_TURNS
