"""Fixtures for the planner tests: the bundled model cards and GPU catalog, and a request builder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from core_planner_inputs import KIMI_K2_THINKING, make_cluster
from meshdeck.core.gpu_spec import GpuSpec, resolve_gpu
from meshdeck.core.model_card import ModelCard
from meshdeck.core.planner import PlanRequest
from meshdeck.services.catalog import load_gpu_catalog, load_model


@pytest.fixture(scope="session")
def v32() -> ModelCard:
    return load_model("deepseek-v3.2")


@pytest.fixture(scope="session")
def v3() -> ModelCard:
    return load_model("deepseek-v3")


@pytest.fixture(scope="session")
def gpu() -> Callable[[str], GpuSpec]:
    catalog = load_gpu_catalog()
    return lambda name: resolve_gpu(name, catalog)


@pytest.fixture(scope="session")
def request_for(gpu: Callable[[str], GpuSpec]) -> Callable[..., PlanRequest]:
    def build(
        card: ModelCard, gpu_name: str = "H200-SXM-141GB", nodes: int = 1, gpus_per_node: int = 8, **kwargs: Any
    ) -> PlanRequest:
        cluster_kwargs = {
            k: kwargs.pop(k) for k in ("intra_node_link", "inter_node_bytes_per_s", "topology") if k in kwargs
        }
        return PlanRequest(card, make_cluster(gpu(gpu_name), nodes, gpus_per_node, **cluster_kwargs), **kwargs)

    return build


@pytest.fixture(scope="session")
def kimi_k2() -> ModelCard:
    from meshdeck.core.model_card import model_card_from_config

    return model_card_from_config(KIMI_K2_THINKING, "Kimi-K2-Thinking/config.json", "kimi-k2-thinking")
