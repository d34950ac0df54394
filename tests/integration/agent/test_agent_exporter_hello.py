"""A real daemon says in its hello where its Prometheus exporter listens; one whose address is taken keeps
serving its socket without the exporter and says why, instead of dying at start (which an attach could
only report as "exited with status 1, see the log on the server")."""

from __future__ import annotations

import socket
import urllib.request

from agent_harness import in_process_agent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_hello_names_the_exporter_address_and_the_exporter_answers_there():
    port = _free_port()
    with in_process_agent("1xH200", interval_s=0.1, prometheus=f"127.0.0.1:{port}") as agent:
        client = agent.client(hello=False)
        assert client.server_hello["hello"]["daemon"] == {"prometheus": f"127.0.0.1:{port}"}
        client.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            assert b'meshdeck_agent_info{simulated="true"' in reply.read()


def test_a_daemon_without_an_exporter_says_so_with_null():
    with in_process_agent("1xH200", interval_s=0.1) as agent:
        client = agent.client(hello=False)
        assert client.server_hello["hello"]["daemon"] == {"prometheus": None}
        client.close()


def test_an_exporter_address_in_use_leaves_the_daemon_serving_and_the_hello_says_why():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        with in_process_agent("1xH200", interval_s=0.1, prometheus=address) as agent:
            client = agent.client()
            daemon = client.server_hello["hello"]["daemon"]
            assert daemon["prometheus"] is None
            assert daemon["prometheus_error"] == f"cannot listen on {address}: Address already in use"
            assert client.call("agent.time")["time"] > 0  # the socket side works
            client.close()
