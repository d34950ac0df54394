"""Optional Prometheus exporter (`serve --prometheus 127.0.0.1:9400`), built on prometheus_client.

Grafana users can scrape meshdeck's view of a server: every GPU (`gpu`, `uuid` labels), every NVLink
link (`gpu`, `link`), every NIC (`nic`, `kind`), the host, and every vLLM worker metric the agent
scraped (`worker`, `engine`). Values are the newest sample in the ring; a simulated agent says so in
`meshdeck_agent_info{simulated="true"}`. It binds only where told (the default host is 127.0.0.1).
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterator, Optional, Tuple

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily

from . import __version__
from .wire_sample import GPU_METRICS, HOST_METRICS, NIC_METRICS

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


class _Collector:
    def __init__(self, ring: Any, machine: Any) -> None:
        self.ring = ring
        self.machine = machine

    def collect(self) -> Iterator[Any]:
        sample: Optional[Dict[str, Any]] = self.ring.latest()
        info = InfoMetricFamily("meshdeck_agent", "meshdeck-agent on this server")
        simulated = bool(getattr(self.machine, "simulated", False))
        info.add_metric([], {"version": __version__, "simulated": "true" if simulated else "false"})
        yield info
        if not sample:
            return
        yield GaugeMetricFamily("meshdeck_sample_seq", "seq of the newest sample", value=sample.get("seq", 0))
        gpu_families = {
            metric: GaugeMetricFamily(
                "meshdeck_gpu_" + metric, "GPU %s" % metric.replace("_", " "), labels=["gpu", "uuid"]
            )
            for metric in (m.name for m in GPU_METRICS)
        }
        link_tx = GaugeMetricFamily(
            "meshdeck_gpu_nvlink_link_tx_bytes_per_s", "NVLink TX per link", labels=["gpu", "link"]
        )
        link_rx = GaugeMetricFamily(
            "meshdeck_gpu_nvlink_link_rx_bytes_per_s", "NVLink RX per link", labels=["gpu", "link"]
        )
        for gpu in sample.get("gpus") or []:
            labels = [str(gpu.get("index")), str(gpu.get("uuid") or "")]
            for metric, family in gpu_families.items():
                value = gpu.get(metric)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    family.add_metric(labels, float(value))
            for link, pair in enumerate(gpu.get("nvlink_links") or []):
                if pair and pair[0] is not None:
                    link_tx.add_metric([labels[0], str(link)], float(pair[0]))
                if pair and pair[1] is not None:
                    link_rx.add_metric([labels[0], str(link)], float(pair[1]))
        yield from gpu_families.values()
        yield link_tx
        yield link_rx
        host = sample.get("host") or {}
        for metric in (m.name for m in HOST_METRICS):
            value = host.get(metric)
            if isinstance(value, (int, float)):
                yield GaugeMetricFamily(
                    "meshdeck_host_" + metric, "host %s" % metric.replace("_", " "), value=float(value)
                )
        for metric in (m.name for m in NIC_METRICS):
            family = GaugeMetricFamily(
                "meshdeck_nic_" + metric, "NIC %s" % metric.replace("_", " "), labels=["nic", "kind"]
            )
            for nic in sample.get("nics") or []:
                value = nic.get(metric)
                if isinstance(value, (int, float)):
                    family.add_metric([str(nic.get("name")), str(nic.get("kind"))], float(value))
            yield family
        worker_families: Dict[str, GaugeMetricFamily] = {}
        for worker in sample.get("workers") or []:
            for metric, value in (worker.get("metrics") or {}).items():
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    continue
                name = "meshdeck_worker_" + _UNSAFE.sub("_", metric)
                family = worker_families.get(name)
                if family is None:
                    family = GaugeMetricFamily(name, "vLLM worker %s" % metric, labels=["worker", "engine"])
                    worker_families[name] = family
                family.add_metric([str(worker.get("id")), str(worker.get("engine") or "")], float(value))
        yield from worker_families.values()


class Exporter:
    def __init__(self, ring: Any, machine: Any, supervisor: Any = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(ring, machine))
        self._server: Any = None
        self.address: Optional[Tuple[str, int]] = None

    def start(self, listen: str) -> None:
        host, port = parse_listen(listen)
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._server = server
        self.address = (host, server.server_address[1])

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
