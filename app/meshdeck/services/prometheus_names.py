"""meshdeck's names as the agent's Prometheus exporter writes them, and back: metrics, devices, selectors.

The exporter (meshdeck_agent.exporter) names a registered metric `meshdeck_<scope>_<name>` (per NVLink
link `meshdeck_gpu_nvlink_link_<tx|rx>_bytes_per_s`; prometheus_client exposes a counter as `*_total`)
and labels the device: `gpu` (+ `uuid`), `gpu` + `link`, `nic` (+ `kind`), `worker` + `engine`, none
for the host. These functions read a Prometheus series back as meshdeck's (device, metric) and write
the label matchers that select one device, so a Prometheus history source and the store agree on names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from meshdeck_agent.exporter import exported_name
from meshdeck_agent.metric_registry import COUNTER, METRICS, WORKER, describe

from meshdeck.core.samples import HOST, Device

AGENT_INFO = "meshdeck_agent_info"  # one series per agent: what lists the hosts
ALL_METRICS = "meshdeck_(gpu|host|nic|worker)_.+"  # every sample series (not the info or seq series)
MAX_GPU_INDEX = 9999  # as Device.from_text reads them back
MAX_LINK = 999


def _exposed_names() -> dict[str, str]:
    """Prometheus name -> meshdeck metric, for every registered metric (a counter is exposed `*_total`)."""
    names: dict[str, str] = {}
    for metric in METRICS:
        name = exported_name(metric)
        if metric.kind == COUNTER and not name.endswith("_total"):
            name += "_total"
        names[name] = metric.name
    return names


EXPOSED_NAMES = _exposed_names()


def meshdeck_metric(prometheus_name: str) -> str | None:
    """The meshdeck metric a Prometheus series name stands for; a worker metric the registry lacks keeps
    its exported name (as the exporter wrote it); None for a name meshdeck's exporter never writes."""
    known = EXPOSED_NAMES.get(prometheus_name)
    if known is not None:
        return known
    if prometheus_name.startswith("meshdeck_worker_") and len(prometheus_name) > len("meshdeck_worker_"):
        return prometheus_name[len("meshdeck_worker_") :]
    return None


def prometheus_names(metric: str) -> list[str]:
    """Every Prometheus name that carries meshdeck `metric` (a GPU's sum and its per-link series share one)."""
    names = sorted(name for name, known in EXPOSED_NAMES.items() if known == metric)
    if not names and re.fullmatch(r"[a-zA-Z0-9_:]+", metric):
        names = [exported_name(describe(WORKER, metric))]  # a worker metric the registry lacks
    return names


def device_of(labels: Mapping[str, str]) -> Device | None:
    """The meshdeck device of an exported series, from its labels; None when they name none meshdeck writes."""
    try:
        if "gpu" in labels:
            index = int(labels["gpu"])
            if not 0 <= index <= MAX_GPU_INDEX:
                return None
            if "link" in labels:
                link = int(labels["link"])
                return Device.nvlink(index, link) if 0 <= link <= MAX_LINK else None
            return Device.gpu(index)
    except ValueError:  # a label from another exporter that happens to be called gpu / link
        return None
    if labels.get("nic"):
        return Device.nic(labels["nic"])
    if labels.get("worker"):
        return Device.worker(labels["worker"], labels.get("engine", ""))
    return HOST


def promql_string(text: str) -> str:
    """A PromQL string literal (Go escapes; JSON's are a subset of them)."""
    return json.dumps(text)


def device_labels(device: Device) -> list[tuple[str, str]]:
    if device.kind == "gpu":
        return [("gpu", str(device.index))]
    if device.kind == "nvlink":
        return [("gpu", str(device.index)), ("link", str(device.link))]
    if device.kind == "nic":
        return [("nic", device.name)]
    if device.kind == "worker":
        return [("worker", device.name), ("engine", device.engine)]
    return [("gpu", ""), ("nic", ""), ("worker", "")]  # the host's own series carry none of them
