"""The agent's metric registry as the app reads it: the unit, scope and kind of every series a host reports.

The registry is defined once, in the agent (meshdeck_agent.metric_registry, the protocol's); this
module hands it to the charts and the history export, so the ui never imports the agent. A series is
keyed as the sample batch keys it, (Device, metric): the device's kind is the metric's scope. A metric
an agent sends that the registry does not know (a newer agent's) still flows: it is described as a
unitless gauge.
"""

from __future__ import annotations

from meshdeck_agent.metric_registry import (
    BYTES,
    BYTES_PER_S,
    CELSIUS,
    COUNTER,
    ENGINES,
    ERRORS,
    GAUGE,
    MHZ,
    PERCENT,
    PREEMPTIONS,
    PREEMPTIONS_PER_S,
    RATIO,
    REQUESTS,
    SCOPES,
    SECONDS,
    TOKENS,
    TOKENS_PER_S,
    UNITLESS,
    UNITS,
    WATTS,
    Metric,
    describe,
    lookup,
)

from meshdeck.core.samples import Device

__all__ = [
    "BYTES",
    "BYTES_PER_S",
    "CELSIUS",
    "COUNTER",
    "ENGINES",
    "ERRORS",
    "GAUGE",
    "MHZ",
    "PERCENT",
    "PREEMPTIONS",
    "PREEMPTIONS_PER_S",
    "RATIO",
    "REQUESTS",
    "SCOPES",
    "SECONDS",
    "TOKENS",
    "TOKENS_PER_S",
    "UNITLESS",
    "UNITS",
    "WATTS",
    "Metric",
    "is_registered",
    "metric_of",
    "series_unit",
    "unit_of",
]


def metric_of(scope: str, name: str) -> Metric:
    """The registered metric `name` of `scope` (a Device kind), or a unitless gauge for one it lacks."""
    return describe(scope, name)


def unit_of(scope: str, name: str) -> str:
    """The unit of metric `name` measured on a device of kind `scope` ("" when unknown or unitless)."""
    return describe(scope, name).unit


def is_registered(scope: str, name: str) -> bool:
    return lookup(scope, name) is not None


def series_unit(device: str, metric: str) -> str:
    """The unit of a stored series, named as the store names it (`gpu3`, `worker:w1/engine:0`); ""
    for a device name meshdeck never writes."""
    try:
        kind = Device.from_text(device).kind
    except ValueError:
        return UNITLESS
    return unit_of(kind, metric)
