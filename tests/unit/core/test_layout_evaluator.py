"""The planner's per-plan evaluator changes speed, never numbers: a layout evaluated alongside others
(sharing whatever the evaluator keeps for its plan) equals one evaluated by a fresh evaluator."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from meshdeck.core.evaluate import LayoutEvaluator
from meshdeck.core.layout_parts import LayoutCandidate
from meshdeck.core.model_card import ModelCard
from meshdeck.core.planner import PlanRequest, plan
from meshdeck.core.rules import gpu_supported


@pytest.mark.parametrize(("nodes", "options"), [(4, {}), (2, {"mtp": True}), (3, {"kv_cache_dtype": "fp8"})])
def test_a_layout_evaluated_alone_equals_the_same_layout_in_a_whole_plan(
    v32: ModelCard, request_for: Callable[..., PlanRequest], nodes: int, options: dict[str, object]
) -> None:
    request = request_for(v32, nodes=nodes, **options)
    result = plan(request)
    supported = gpu_supported(request.model, request.cluster.gpu, result.settings.weights_dtype)
    assert len(result.layouts) > 20
    for layout in result.layouts:
        candidate = LayoutCandidate(
            layout.tensor_parallel, layout.pipeline_parallel, layout.data_parallel, layout.expert_parallel,
            layout.placement,
        )  # fmt: skip
        alone = LayoutEvaluator(request, result.settings, supported).evaluate(candidate)
        assert alone == layout, layout.label()
        assert alone.as_dict() == layout.as_dict(), layout.label()  # the lazily built details too
