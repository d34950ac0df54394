"""The agent's wire protocol over a real Unix socket: hello, every method, bad input, sample streaming."""

from __future__ import annotations

import json
import os
import random
import re
import socket
import stat
import threading
import time

import pytest
from agent_harness import in_process_agent, wait_for
from meshdeck_agent import __version__ as AGENT_VERSION
from meshdeck_agent import protocol
from meshdeck_agent.daemon import METHOD_TABLE


@pytest.fixture(scope="module")
def agent():
    with in_process_agent("8xH200", interval_s=0.1) as running:
        yield running


def test_server_sends_hello_first_with_protocol_version_and_sequence_epoch(agent):
    client = agent.client(hello=False)
    epoch = agent.daemon.seqs.epoch
    daemon = {"prometheus": None}  # how it runs (test_agent_exporter_hello.py has an exporter)
    assert client.server_hello == {"hello": {"protocol": 1, "agent": AGENT_VERSION, "epoch": epoch, "daemon": daemon}}
    assert re.fullmatch(r"[0-9a-f]{16}", epoch), epoch  # 8 random bytes in hex
    client.close()


def test_requests_before_hello_get_an_error_and_the_session_stays_usable(agent):
    client = agent.client(hello=False)
    client.send({"id": 1, "method": "agent.time", "params": {}})
    reply = client.read()
    assert reply["id"] == 1 and reply["error"]["code"] == "bad_request" and "hello" in reply["error"]["message"]
    client.send({"hello": {"protocol": 1, "agent": "t"}})
    assert "time" in client.call("agent.time")
    client.close()


def test_a_different_protocol_major_is_refused_naming_both_versions(agent):
    client = agent.client(hello=False)
    client.send({"hello": {"protocol": 2, "agent": "9.9"}})
    reply = client.read()
    assert reply["error"]["code"] == "bad_request"
    assert "protocol 1" in reply["error"]["message"] and "2" in reply["error"]["message"]
    with pytest.raises(EOFError):
        client.read()


def test_inventory_is_simulated_8xh200_with_nvswitch_matrix(agent):
    client = agent.client()
    inventory = client.call("inventory")
    client.close()
    assert inventory["simulated"] is True
    assert len(inventory["gpus"]) == 8
    assert {g["name"] for g in inventory["gpus"]} == {"NVIDIA H200"}
    matrix = inventory["topology"]["matrix"]
    assert matrix[0][0] == "X" and matrix[0][7] == "NV18" and matrix[5][2] == "NV18"
    assert inventory["topology"]["nearest_nic"]["3"] == "mlx5_3/1"


def test_samples_read_pages_through_the_ring_in_seq_order(agent):
    client = agent.client()
    assert wait_for(lambda: agent.daemon.ring.last_seq >= 12)
    first = client.call("samples.read", {"since_seq": 0, "limit": 5})
    assert [s["seq"] for s in first["samples"]] == list(range(first["first_seq"], first["first_seq"] + 5))
    assert first["more"] is True
    following = client.call("samples.read", {"since_seq": first["samples"][-1]["seq"], "limit": 5})
    assert following["samples"][0]["seq"] == first["samples"][-1]["seq"] + 1
    sample = following["samples"][0]
    assert sample["simulated"] is True and len(sample["gpus"]) == 8
    assert set(sample) >= {"seq", "ts", "gpus", "host", "nics", "workers"}
    decoded = protocol.Sample.from_wire(sample)  # what the agent sends passes the app's boundary check
    assert decoded.gpus[0].value("memory_total_bytes") == 143771 * 1024 * 1024
    client.close()


def test_subscribe_delivers_backlog_after_since_seq_then_live_samples_without_gaps(agent):
    assert wait_for(lambda: agent.daemon.ring.last_seq >= 20)
    start = agent.daemon.ring.last_seq - 10
    client = agent.client()
    result = client.call("samples.subscribe", {"since_seq": start})
    assert result["subscribed"] is True
    seqs: list[int] = []
    deadline = time.monotonic() + 20
    while len(seqs) < 25 and time.monotonic() < deadline:
        event = client.wait_event(lambda e: e["event"] == "samples")
        assert event["data"]["dropped"] == 0
        seqs.extend(s["seq"] for s in event["data"]["samples"])
    assert seqs[:3] == [start + 1, start + 2, start + 3]
    assert seqs == list(range(start + 1, start + 1 + len(seqs)))
    client.call("samples.unsubscribe")
    client.close()


def test_a_since_seq_from_the_future_subscribes_live(agent):
    client = agent.client()
    result = client.call("samples.subscribe", {"since_seq": 10**9})
    assert result["cursor"] == result["last_seq"]
    event = client.wait_event(lambda e: e["event"] == "samples")
    assert event["data"]["samples"][0]["seq"] == result["last_seq"] + 1
    client.close()


def test_subscribe_without_since_seq_sends_only_live_samples(agent):
    client = agent.client()
    result = client.call("samples.subscribe", {})
    event = client.wait_event(lambda e: e["event"] == "samples")
    assert event["data"]["samples"][0]["seq"] > result["last_seq"]
    client.close()


def test_unknown_methods_and_bad_params_are_answered_with_named_errors(agent):
    client = agent.client()
    assert client.request("gpu.reset")["error"]["code"] == "unknown_method"
    bad = client.request("samples.read", {"since_seq": "yesterday"})
    assert bad["error"]["code"] == "bad_params" and "since_seq" in bad["error"]["message"]
    extra = client.request("agent.time", {"verbose": True})
    assert extra["error"]["code"] == "bad_params" and "verbose" in extra["error"]["message"]
    missing = client.request("workers.stop", {})
    assert "'id'" in missing["error"]["message"]
    assert client.request("workers.logs", {"id": "nope"})["error"]["code"] == "not_found"
    client.close()


def test_fuzz_ten_thousand_bad_lines_each_get_an_error_and_the_agent_still_answers(agent):
    client = agent.client()
    rng = random.Random(7)
    lines: list[bytes] = []
    samples = [
        b"{",
        b"not json",
        b"[1,2,3]",
        b'{"id": -1, "method": "agent.time"}',
        b'{"id": 3, "method": 5}',
        b'{"id": 4, "method": "x", "params": []}',
        b'{"result": 1}',
        b'{"event": "bogus"}',
        b"\xff\xfe\xfd",
        b'{"hello": {"protocol": "1"}}',
        b'{"id": 5, "method": "samples.read", "params": {"since_seq": -4}}',
        b"",
        b'"just a string"',
        b'{"id": 1.5, "method": "agent.time"}',
        b"{" * 5000,
        b'{"id": 6, "method": "workers.start", "params": {"spec": {"argv": []}}}',
    ]
    for _ in range(10_000):
        choice = rng.random()
        if choice < 0.7:
            lines.append(rng.choice(samples))
        else:
            lines.append(bytes(rng.randrange(0, 256) for _ in range(rng.randrange(1, 60))).replace(b"\n", b"?"))
    payload = b"\n".join(lines) + b"\n"
    sender = threading.Thread(target=client.send_raw, args=(payload,))
    sender.start()
    errors = 0
    while errors < len(lines):
        reply = client.read()
        if "event" in reply:
            continue
        assert "error" in reply, reply
        assert reply["error"]["code"] in protocol.ERROR_CODES
        errors += 1
    sender.join()
    assert "time" in client.call("agent.time")
    client.close()


def test_an_oversized_line_is_refused_and_the_next_line_works(agent):
    client = agent.client()
    client.send_raw(
        b'{"id": 1, "method": "agent.time", "params": {"pad": "' + b"x" * (protocol.MAX_LINE_BYTES + 10) + b'"}}\n'
    )
    reply = client.read()
    assert reply["error"]["code"] == "line_too_long"
    assert "time" in client.call("agent.time")
    client.close()


def test_truncated_last_line_gets_an_error_before_the_agent_closes(agent):
    client = agent.client()
    client.send_raw(b'{"id": 9, "method": "agent.ti')
    client.sock.shutdown(socket.SHUT_WR)
    reply = client.read()
    assert reply["error"]["code"] == "parse_error" and "truncated" in reply["error"]["message"]
    client.close()


def test_checks_answer_for_files_ports_connect_versions_and_time(agent, tmp_path):
    client = agent.client()
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "model" / "shard-00001.safetensors").write_bytes(b"\0" * 100)
    files = client.call("checks.files", {"path": str(tmp_path / "model")})
    assert files["exists"] is True
    assert sorted(files["files"]) == [["config.json", 2], ["shard-00001.safetensors", 100]]
    assert client.call("checks.files", {"path": str(tmp_path / "absent")})["exists"] is False
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    busy_port = listener.getsockname()[1]
    ports = client.call("checks.ports_free", {"ports": [busy_port], "host": "127.0.0.1"})
    assert ports["ports"][str(busy_port)] is False
    connect = client.call("checks.tcp_connect", {"host": "127.0.0.1", "port": busy_port, "timeout_s": 2})
    assert connect["ok"] is True and connect["rtt_ms"] >= 0
    listener.close()
    refused = client.call("checks.tcp_connect", {"host": "127.0.0.1", "port": busy_port, "timeout_s": 2})
    assert refused["ok"] is False and refused["error"]
    bad_port = client.request("checks.ports_free", {"ports": [70000]})
    assert bad_port["error"]["code"] == "bad_params" and "70000" in bad_port["error"]["message"]
    versions = client.call("checks.versions", {"python": "python3"})
    assert versions["python"] and versions["python"].count(".") == 2
    missing = client.call("checks.versions", {"python": "/nonexistent/python9"})
    assert missing["python"] is None and "not found" in missing["error"]
    assert abs(client.call("agent.time")["time"] - time.time()) < 5
    route = client.call("checks.route", {"host": "localhost"})  # resolved by the agent
    assert (route["source"], route["interface"]) == ("127.0.0.1", "lo")
    bad_host = client.request("checks.route", {"host": "head; rm -rf /"})
    assert bad_host["error"]["code"] == "bad_params" and "'host'" in bad_host["error"]["message"]
    client.close()


def test_socket_is_0600_in_a_0700_directory(agent):
    mode = os.stat(agent.socket_path).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    assert stat.S_IMODE(os.stat(agent.socket_path.parent).st_mode) == 0o700


def test_every_method_in_the_protocol_is_answered_without_unknown_method(agent):
    client = agent.client()
    for method in protocol.METHODS:
        if method == "agent.shutdown":
            continue
        reply = client.request(method, {})
        if "error" in reply:
            assert reply["error"]["code"] != "unknown_method", (method, reply)
    client.close()


def test_no_daemon_attribute_shadows_a_method_handler(agent):
    # The table holds the class's functions; an instance attribute of the same name (the shutdown Event once
    # was `_shutdown`, the agent.shutdown handler's name) would hide the handler from the daemon itself.
    for name, method in METHOD_TABLE.items():
        bound = getattr(agent.daemon, method.handler.__name__)
        assert getattr(bound, "__func__", None) is method.handler, (name, bound)


def test_samples_carry_simulated_flag_and_sample_shape_on_the_wire(agent):
    client = agent.client()
    assert wait_for(lambda: agent.daemon.ring.last_seq >= 2)
    sample = client.call("samples.read", {"since_seq": agent.daemon.ring.last_seq - 1})["samples"][0]
    gpu = sample["gpus"][0]
    for key in ("memory_used_bytes", "power_w", "temperature_c", "nvlink_links", "pcie_tx_bytes_per_s", "xid_events"):
        assert key in gpu
    assert len(gpu["nvlink_links"]) == 18
    assert json.loads(json.dumps(sample)) == sample
    client.close()


def test_a_subscriber_whose_since_seq_rolled_off_the_ring_is_told_how_many_were_dropped():
    with in_process_agent("1xH100", interval_s=0.05, ring_capacity=20) as small:
        assert wait_for(lambda: small.daemon.ring.first_seq > 1, timeout=60)
        client = small.client()
        client.call("samples.subscribe", {"since_seq": 0})
        event = client.wait_event(lambda e: e["event"] == "samples")
        first = event["data"]["samples"][0]["seq"]
        assert first > 1 and event["data"]["dropped"] == first - 1
        client.close()


def test_the_prometheus_exporter_serves_the_daemons_samples():
    import urllib.request

    with in_process_agent("2xH200", interval_s=0.1, prometheus="127.0.0.1:0") as exported:
        assert wait_for(lambda: exported.daemon.ring.last_seq >= 1)
        host, port = exported.daemon.exporter.address
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        assert 'meshdeck_gpu_memory_total_bytes{gpu="1"' in text and 'simulated="true"' in text


def test_numbers_outside_json_or_past_a_params_bound_are_refused_and_the_session_keeps_answering(agent):
    """An interval_s of 1e10 (or Infinity) once ended the session's writer thread (Condition.wait
    overflowed) and a grace_s of Infinity waited forever; NaN and Infinity are not JSON."""
    client = agent.client()
    client.send_raw(b'{"id": 1, "method": "workers.stop", "params": {"id": "w", "grace_s": Infinity}}\n')
    assert client.read()["error"]["code"] == "parse_error"
    client.send_raw(b'{"id": 2, "method": "samples.subscribe", "params": {"interval_s": NaN}}\n')
    assert client.read()["error"]["code"] == "parse_error"
    too_long = client.request("samples.subscribe", {"interval_s": 1e10})
    assert too_long["error"]["code"] == "bad_params" and "at most 3600" in too_long["error"]["message"]
    client.send_raw(b'{"id": 3, "method": "workers.stop", "params": {"id": "w", "grace_s": 1e400}}\n')
    overflow = client.read()  # 1e400 is JSON, and reads as infinity
    assert (
        overflow["id"] == 3 and overflow["error"]["code"] == "bad_params" and "finite" in overflow["error"]["message"]
    )
    client.call("samples.subscribe", {"interval_s": 3600})
    last = agent.daemon.ring.last_seq
    assert wait_for(lambda: agent.daemon.ring.last_seq >= last + 2)
    assert "time" in client.call("agent.time")
    client.close()


def test_a_host_the_resolver_cannot_take_is_a_bad_param_not_an_internal_error(agent):
    client = agent.client()
    for method, params in (
        ("checks.ports_free", {"ports": [8000], "host": "a\u0000b"}),
        ("checks.ports_free", {"ports": [8000], "host": "\u00e9" * 70}),
        ("checks.tcp_connect", {"host": "a\u0000b", "port": 80}),
        ("checks.route", {"host": "a\u0000b"}),
    ):
        reply = client.request(method, params)
        assert reply.get("error", {}).get("code") == "bad_params", (method, params, reply)
    client.close()
