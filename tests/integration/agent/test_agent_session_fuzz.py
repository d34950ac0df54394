"""A real daemon fed fuzzed lines: every line gets exactly one reply or error, no error is `internal`
(a handler that raised), the session keeps answering, and a flood of bad input or of failing requests
is logged a few times per client, not once per line, with nothing a client sent repeated whole."""

from __future__ import annotations

import json
import logging
import threading

import hostile_peer
import pytest
from agent_harness import in_process_agent, wait_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from meshdeck_agent import protocol
from meshdeck_agent.lograte import LOG_BURST

# Methods a fuzzed line may name. Left out: workers.start (it starts processes), agent.shutdown, and the
# checks that walk the disk, run an interpreter or resolve names (they are fuzzed through validate_params).
FUZZED_METHODS = sorted(
    set(protocol.METHOD_PARAMS)
    - {"workers.start", "agent.shutdown", "checks.files", "checks.versions", "checks.tcp_connect", "checks.route"}
)

json_values = hostile_peer.json_values(max_leaves=12)


# Values at and past the edges of what params take, so fuzzed requests reach the handlers, not only
# the type checks.
EDGE_NUMBERS = [0, 1, -1, 0.5, 1e10, 1e300, 2**64, float("inf"), float("-inf"), float("nan")]


def _value_for(param: protocol.Param) -> st.SearchStrategy[object]:
    options: list[st.SearchStrategy[object]] = [json_values]
    if int in param.types or float in param.types:
        options += [st.sampled_from(EDGE_NUMBERS), st.integers(-2, 2**70), st.floats()]
    if str in param.types:
        options += [st.text(max_size=12), st.sampled_from(["", "\x00", "a\x00b", "-x", "\u00e9" * 70, "x" * 300])]
    if list in param.types:
        options.append(st.lists(st.one_of(st.integers(-1, 70_000), json_values), max_size=4))
    return st.one_of(options)


def _request(method: str) -> st.SearchStrategy[bytes]:
    schema = protocol.METHOD_PARAMS.get(method, {})
    typed = st.fixed_dictionaries({}, optional={name: _value_for(param) for name, param in schema.items()})
    params = st.one_of(typed, st.dictionaries(st.text(max_size=8), json_values, max_size=2), json_values)
    request_id = st.one_of(st.integers(0, 2**40), st.sampled_from([-1, 1.5, "7", None, 2**70]))
    request = st.fixed_dictionaries({"id": request_id, "method": st.just(method), "params": params})
    return request.map(hostile_peer.line)


other_objects = hostile_peer.wire_objects().map(hostile_peer.line)
garbage = hostile_peer.garbage_lines

# each example: requests of one method (or of a made-up one) among other objects and garbage
fuzzed_lines = st.one_of(st.sampled_from(FUZZED_METHODS), st.text(max_size=20)).flatmap(
    lambda method: st.lists(
        st.one_of(_request(method), _request(method), other_objects, garbage), min_size=1, max_size=12
    )
)


@pytest.fixture(scope="module")
def agent():
    with in_process_agent("2xH200", interval_s=0.05) as running:
        yield running


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(lines=fuzzed_lines)
def test_every_fuzzed_line_gets_one_reply_and_the_session_keeps_answering(agent, lines):
    client = agent.client()
    client.sock.settimeout(20.0)  # a writer thread that died would otherwise hang the test, not fail it
    try:
        client.send_raw(b"".join(line + b"\n" for line in lines))
        replies = []
        while len(replies) < len(lines):
            message = client.read()
            if "event" not in message:
                replies.append(message)
        for reply in replies:
            assert "result" in reply or reply["error"]["code"] in protocol.ERROR_CODES, reply
            assert "error" not in reply or reply["error"]["code"] != protocol.INTERNAL, reply
            assert len(json.dumps(reply)) < 8192 or "result" in reply
        if any(b"samples.subscribe" in line for line in lines):
            # a subscription's next deliveries come after a sample or two: the session must still answer then
            last = agent.daemon.ring.last_seq
            assert wait_for(lambda: agent.daemon.ring.last_seq >= last + 2)
        assert "time" in client.call("agent.time")
    finally:
        client.close()
    assert agent.thread.is_alive()


class _Records(logging.Handler):
    """Every record the agent's loggers emit (emit runs under logging.Handler's own lock)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def snapshot(self) -> list[logging.LogRecord]:
        with self.lock:
            return list(self.records)


@pytest.fixture
def agent_log():
    handler = _Records()
    logger = logging.getLogger("meshdeck_agent")
    logger.addHandler(handler)
    previous = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def _client_records(handler: _Records, name: str) -> list[logging.LogRecord]:
    return [r for r in handler.snapshot() if r.getMessage().startswith(name + ":")]


def _flood(agent, lines: list[bytes]) -> tuple[str, list[dict]]:
    """Send `lines` on one connection, read one reply per line, close; returns the session's name."""
    client = agent.client()
    client.call("agent.time")
    session = agent.daemon._sessions[-1]
    sender = threading.Thread(target=client.send_raw, args=(b"".join(line + b"\n" for line in lines),))
    sender.start()
    replies = []
    while len(replies) < len(lines):
        message = client.read()
        if "event" not in message:
            replies.append(message)
    sender.join()
    client.close()
    assert wait_for(lambda: session not in agent.daemon._sessions)
    return session.name, replies


def test_a_flood_of_malformed_lines_is_logged_a_few_times_then_summarised(agent, agent_log):
    lines = [b"not json", b'{"id": 1, "method": 5}', b"\xff\xfe"] * 1000 + [
        b'{"id": 2, "method": "' + b"m" * 100_000 + b'"}'
    ] * 3
    name, replies = _flood(agent, lines)
    assert all("error" in reply and len(reply["error"]["message"]) <= 2100 for reply in replies)
    records = _client_records(agent_log, name)
    assert LOG_BURST <= len(records) <= LOG_BURST + 3, [r.getMessage()[:100] for r in records]
    assert all(len(r.getMessage()) < 1000 for r in records)
    assert f"{len(lines) - LOG_BURST} more problems" in records[-1].getMessage()


def test_a_flood_of_requests_that_hit_a_bug_logs_a_few_tracebacks_not_one_per_request(agent, agent_log, monkeypatch):
    def broken_inventory():
        raise RuntimeError("a bug in the inventory")

    monkeypatch.setattr(agent.daemon.machine, "inventory", broken_inventory)
    lines = [json.dumps({"id": n, "method": "inventory"}).encode() for n in range(500)]
    name, replies = _flood(agent, lines)
    assert {reply["error"]["code"] for reply in replies} == {protocol.INTERNAL}
    assert len([r for r in agent_log.snapshot() if r.exc_info]) == LOG_BURST
    assert len(_client_records(agent_log, name)) <= LOG_BURST + 3


def test_a_100_kb_version_or_method_name_is_never_echoed_whole(agent):
    client = agent.client(hello=False)
    client.send({"hello": {"protocol": 1, "agent": "9" * 100_000}})
    refused = client.read()
    assert refused["error"]["code"] == "bad_request" and len(refused["error"]["message"]) < 300
    client.send({"hello": {"protocol": 1, "agent": "test"}})
    unknown = client.request("m" * 100_000)
    assert unknown["error"]["code"] == "unknown_method" and len(unknown["error"]["message"]) < 1000
    client.close()
