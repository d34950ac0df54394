"""Optional Prometheus exporter (`serve --prometheus 127.0.0.1:9400`), built on prometheus_client.

Grafana users can scrape meshdeck's view of a server: every GPU (`gpu`, `uuid` labels), every NVLink
link (`gpu`, `link`), every NIC (`nic`, `kind`), the host, and every vLLM worker metric the agent
scraped (`worker`, `engine`). Values are the newest sample in the ring; a simulated agent says so in
`meshdeck_agent_info{simulated="true"}`. It binds only where told (the default host is 127.0.0.1).
Names, help text, units and types (counter or gauge) come from the metric registry
(metric_registry.py); a worker metric the registry lacks is exported as an unitless gauge.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterator, List, Optional, Tuple
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

from . import __version__
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

_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")


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


class Exporter:
    def __init__(self, ring: SampleRing, machine: Machine) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(ring, machine))
        self._server: Optional[WSGIServer] = None
        self.address: Optional[Tuple[str, int]] = None

    def start(self, listen: str) -> None:
        host, port = parse_listen(listen)
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
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
