"""Optional Prometheus exporter (`serve --prometheus 127.0.0.1:9400`), built on prometheus_client.

Grafana users can scrape meshdeck's view of a server: every GPU (`gpu`, `uuid` labels), every NVLink
link (`gpu`, `link`), every NIC (`nic`, `kind`), the host, and every vLLM worker metric the agent
scraped (`worker`, `engine`). Values are the newest sample in the ring; a simulated agent says so in
`meshdeck_agent_info{simulated="true"}`. It binds only where told (the default host is 127.0.0.1).
Names, help text, units and types (counter or gauge) come from the metric registry
(metric_registry.py); a worker metric the registry lacks is exported as an unitless gauge.

The HTTP server is this module's own (`_ExporterServer`, serving prometheus_client's WSGI app), not
`prometheus_client.start_http_server`, which keeps an idle connection and its thread forever: a peer that
opens connections and sends nothing would take every descriptor of the daemon, whose socket then cannot
accept the app. Here each read or write waits at most IDLE_TIMEOUT_S, a connection lives at most
CONNECTION_DEADLINE_S whatever it sends, at most MAX_CONNECTIONS are served at once (one more is closed
as soon as it is accepted, logged once per burst), and an accept that fails for want of descriptors or
memory waits a moment instead of spinning.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import sys
import threading
import time
from socketserver import ThreadingMixIn
from typing import Any, Dict, Iterator, List, Optional, Tuple
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

from . import __version__
from .accept_backoff import AcceptBackoff, out_of_resources
from .machine import Machine
from .metric_registry import (
    COUNTER,
    GPU_METRICS,
    HOST_METRICS,
    NIC_METRICS,
    NVLINK,
    NVLINK_METRICS,
    WORKER,
    Metric,
    describe,
)
from .ring import SampleRing
from .wire_sample import Sample

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")

IDLE_TIMEOUT_S = 10.0  # one read or write of a scrape may wait this long
CONNECTION_DEADLINE_S = 30.0  # a connection is shut after this long, however slowly it keeps sending
MAX_CONNECTIONS = 32  # served at once; Prometheus scrapes with one


def parse_listen(text: str) -> Tuple[str, int]:
    """'127.0.0.1:9400' or ':9400' or '9400' -> (host, port); raises ValueError naming the problem."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise ValueError("--prometheus: expected HOST:PORT, got %r" % text) from None
    if not 0 <= number <= 65535:
        raise ValueError("--prometheus: port must be 0-65535 (0 picks a free one), got %d" % number)
    return host, number


def exported_name(metric: Metric) -> str:
    """The Prometheus name of a registered metric: `meshdeck_<scope>_<name>`, per NVLink link
    `meshdeck_gpu_nvlink_link_<tx|rx>_bytes_per_s`, a worker metric sanitised to Prometheus' alphabet."""
    if metric.scope == NVLINK:
        return "meshdeck_gpu_nvlink_link_" + metric.name[len("nvlink_") :]
    return "meshdeck_%s_%s" % (metric.scope, _UNSAFE.sub("_", metric.name))


def _help(metric: Metric) -> str:
    """The registry's help line and unit (`GPU power draw (W)`); a name it lacks says so."""
    text = metric.help or "%s %s (not in this agent's metric registry)" % (metric.scope, metric.name)
    return "%s (%s)" % (text, metric.unit) if metric.unit else text


def _family(metric: Metric, labels: List[str]) -> Any:
    """A counter family for a registered counter, else a gauge family; named, helped and typed by the registry."""
    kind = CounterMetricFamily if metric.kind == COUNTER else GaugeMetricFamily
    return kind(exported_name(metric), _help(metric), labels=labels)


class _Collector:
    def __init__(self, ring: SampleRing, machine: Machine) -> None:
        self.ring = ring
        self.machine = machine

    def collect(self) -> Iterator[Any]:
        sample: Optional[Sample] = self.ring.latest()
        info = InfoMetricFamily("meshdeck_agent", "meshdeck-agent on this server")
        simulated = self.machine.simulated
        info.add_metric([], {"version": __version__, "simulated": "true" if simulated else "false"})
        yield info
        if sample is None:
            return
        yield GaugeMetricFamily("meshdeck_sample_seq", "seq of the newest sample", value=sample.seq)
        gpu_families = [_family(metric, ["gpu", "uuid"]) for metric in GPU_METRICS]
        link_families = [_family(metric, ["gpu", "link"]) for metric in NVLINK_METRICS]
        for gpu in sample.gpus:
            labels = [str(gpu.index), gpu.uuid or ""]
            for family, value in zip(gpu_families, gpu.values):
                if value is not None:
                    family.add_metric(labels, float(value))
            for link, pair in enumerate(gpu.nvlink_links):
                for family, value in zip(link_families, pair):
                    if value is not None:
                        family.add_metric([labels[0], str(link)], float(value))
        yield from gpu_families
        yield from link_families
        if sample.host is not None:
            for metric, value in zip(HOST_METRICS, sample.host.values):
                if value is not None:
                    family = _family(metric, [])
                    family.add_metric([], float(value))
                    yield family
        nic_families = [_family(metric, ["nic", "kind"]) for metric in NIC_METRICS]
        for nic in sample.nics:
            for family, value in zip(nic_families, (nic.tx_bytes_per_s, nic.rx_bytes_per_s)):
                if value is not None:
                    family.add_metric([nic.name, str(nic.kind)], float(value))
        yield from nic_families
        worker_families: Dict[str, Any] = {}
        for worker in sample.workers:
            for name, value in worker.metrics:
                family = worker_families.get(name)
                if family is None:
                    family = worker_families[name] = _family(describe(WORKER, name), ["worker", "engine"])
                family.add_metric([worker.id, worker.engine], float(value))
        yield from worker_families.values()


class _QuietHandler(WSGIRequestHandler):
    """One scrape per connection; each socket operation waits at most the server's idle timeout."""

    server: _ExporterServer

    def setup(self) -> None:
        self.request.settimeout(self.server.idle_timeout_s)
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged (Prometheus scrapes every few seconds)."""


class _ExporterServer(ThreadingMixIn, WSGIServer):
    """A thread per connection, at most `max_connections` at once, none past `deadline_s`."""

    daemon_threads = True
    request_queue_size = 64

    def __init__(
        self,
        address: Tuple[str, int],
        family: int,
        max_connections: int = MAX_CONNECTIONS,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        deadline_s: float = CONNECTION_DEADLINE_S,
    ) -> None:
        self.address_family = family
        self.max_connections = max_connections
        self.idle_timeout_s = idle_timeout_s
        self.deadline_s = deadline_s
        self._slots = threading.BoundedSemaphore(max_connections)
        self._open: Dict[socket.socket, float] = {}  # connection -> when it is shut
        self._watch = threading.Condition()
        self._closing = False
        self._refusing = False  # a burst of connections past the cap is being refused (logged at its start)
        self._backoff = AcceptBackoff()
        super().__init__(address, _QuietHandler)
        self._watcher = threading.Thread(target=self._shut_overdue, name="exporter-deadlines", daemon=True)
        self._watcher.start()

    def get_request(self) -> Tuple[socket.socket, Any]:
        try:
            accepted = super().get_request()
        except OSError as exc:
            if out_of_resources(exc):
                if self._backoff.failed():
                    log.warning("Prometheus exporter: accept failed (%s); retrying while connections end", exc)
                time.sleep(self._backoff.delay_s)
            raise  # serve_forever ignores it and polls again
        if self._backoff.succeeded():
            log.info("Prometheus exporter: accepting connections again")
        return accepted

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            if not self._refusing:
                self._refusing = True
                log.warning(
                    "Prometheus exporter: %d connections open, the most it serves at once; closing new ones "
                    "until some end",
                    self.max_connections,
                )
            self.shutdown_request(request)
            return
        self._refusing = False
        with self._watch:
            self._open[request] = time.monotonic() + self.deadline_s
            self._watch.notify()
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread to serve it (RuntimeError: can't start new thread)
            self._release(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def _release(self, request: Any) -> None:
        with self._watch:
            self._open.pop(request, None)
        self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A peer that timed out, reset or was shut at its deadline is routine (no traceback in the log);
        anything else is logged with its traceback, as socketserver would print it."""
        if isinstance(sys.exc_info()[1], OSError):
            log.debug("Prometheus exporter: a connection from %s ended early", client_address, exc_info=True)
        else:
            log.exception("Prometheus exporter: serving %s failed", client_address)

    def _shut_overdue(self) -> None:
        with self._watch:
            while not self._closing:
                now = time.monotonic()
                for connection, deadline in list(self._open.items()):
                    if deadline <= now:
                        del self._open[connection]
                        with contextlib.suppress(OSError):
                            connection.shutdown(socket.SHUT_RDWR)  # its thread's read or write ends now
                next_deadline = min(self._open.values(), default=None)
                self._watch.wait(None if next_deadline is None else max(0.01, next_deadline - now))

    def server_close(self) -> None:
        with self._watch:
            self._closing = True
            self._watch.notify()
        super().server_close()


def _listen_family(host: str, port: int) -> int:
    """The address family `host` binds with (IPv6 for `::1`), as prometheus_client picks it."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    return int(infos[0][0])


class Exporter:
    def __init__(self, ring: SampleRing, machine: Machine) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(ring, machine))
        self._server: Optional[_ExporterServer] = None
        self.address: Optional[Tuple[str, int]] = None

    def start(
        self,
        listen: str,
        max_connections: int = MAX_CONNECTIONS,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        deadline_s: float = CONNECTION_DEADLINE_S,
    ) -> None:
        """Listen on `listen` (HOST:PORT) and serve in a thread; OSError when it cannot listen there."""
        host, port = parse_listen(listen)
        family = _listen_family(host, port)
        server = _ExporterServer((host, port), family, max_connections, idle_timeout_s, deadline_s)
        server.set_app(make_wsgi_app(self.registry))
        threading.Thread(target=server.serve_forever, name="exporter", daemon=True).start()
        self._server = server
        self.address = (host, server.server_address[1])

    def listening(self) -> Optional[str]:
        """Where it serves, as HOST:PORT (an IPv6 host in brackets); None before start()."""
        if self.address is None:
            return None
        host, port = self.address
        return ("[%s]:%d" if ":" in host else "%s:%d") % (host, port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
