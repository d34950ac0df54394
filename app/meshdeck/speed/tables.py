"""Which aiconfigurator-core system and model config stand for a meshdeck GPU and model card.

One table (resources/speed-tables.json) read by one loader, as the rest of meshdeck reads its facts: a GPU
absent from it has no kernel tables and is planned with the roofline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from meshdeck.core.errors import InputError

TABLE_FILE = "speed-tables.json"


@dataclass(frozen=True)
class SpeedTables:
    package: str
    engine: str
    systems: dict[str, str]  # meshdeck GPU name -> aiconfigurator system
    bundled_models: dict[str, str]  # bundled meshdeck model name -> aiconfigurator model id
    architectures: dict[str, str]  # config.json architecture -> aiconfigurator model id of that architecture
    weights: dict[str, tuple[str, str]]  # meshdeck weights dtype -> (GEMM quant mode, MoE quant mode)
    kv_cache: dict[str, str]  # meshdeck KV storage (KvFormat.kv_cache_dtype) -> KV cache quant mode
    v4_experts: dict[str, str] = field(default_factory=dict)  # DeepSeek-V4 expert_dtype -> MoE quant mode
    v4_kv_cache: tuple[str, ...] = ()  # the KV cache quant modes the library's DeepSeek-V4 attention tables hold


def _mapping(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise InputError(f"resources/{TABLE_FILE}", f"{key} must be an object")
    return value


def _strings(data: dict[str, Any], key: str) -> dict[str, str]:
    value = _mapping(data, key)
    for name, item in value.items():
        if not isinstance(item, str):
            raise InputError(f"resources/{TABLE_FILE}", f"{key}.{name} must be a string")
    return dict(value)


def parse_speed_tables(data: Any) -> SpeedTables:
    if not isinstance(data, dict):
        raise InputError(f"resources/{TABLE_FILE}", "must be a JSON object")
    weights: dict[str, tuple[str, str]] = {}
    for name, modes in _mapping(data, "weights").items():
        if (
            not isinstance(modes, dict)
            or not isinstance(modes.get("gemm"), str)
            or not isinstance(modes.get("moe"), str)
        ):
            raise InputError(f"resources/{TABLE_FILE}", f"weights.{name} needs string gemm and moe modes")
        weights[name] = (modes["gemm"], modes["moe"])
    return SpeedTables(
        package=str(data.get("package", "aiconfigurator-core")),
        engine=str(data.get("engine", "vllm")),
        systems=_strings(data, "systems"),
        bundled_models=_strings(data, "bundled_models"),
        architectures=_strings(data, "architectures"),
        weights=weights,
        kv_cache=_strings(data, "kv_cache"),
        v4_experts=_strings(data, "v4_experts") if "v4_experts" in data else {},
        v4_kv_cache=_string_list(data, "v4_kv_cache"),
    )


def _string_list(data: dict[str, Any], key: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InputError(f"resources/{TABLE_FILE}", f"{key} must be a list of strings")
    return tuple(value)


@lru_cache(maxsize=1)
def speed_tables() -> SpeedTables:
    text = (resources.files("meshdeck") / "resources" / TABLE_FILE).read_text(encoding="utf-8")
    return parse_speed_tables(json.loads(text))
