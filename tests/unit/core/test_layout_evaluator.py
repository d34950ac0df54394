"""The planner's per-plan evaluator and its fast LayoutPlan builder change speed, never numbers: a layout
evaluated alongside others (sharing the evaluator's per-plan tables) equals one evaluated alone, and
`new_layout_plan` builds exactly what LayoutPlan(**values) builds, refusing what __init__ refuses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields

import pytest
from meshdeck.core.evaluate import LayoutEvaluator
from meshdeck.core.layout_plan import LayoutPlan, new_layout_plan
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
        alone = LayoutEvaluator(request, result.settings, supported).evaluate(
            layout.tensor_parallel, layout.pipeline_parallel, layout.data_parallel, layout.expert_parallel,
            layout.placement,
        )  # fmt: skip
        assert alone == layout, layout.label()
        assert alone.as_dict() == layout.as_dict(), layout.label()  # the lazily built details too


def test_new_layout_plan_builds_what_the_dataclass_builds_and_refuses_what_it_refuses(
    v32: ModelCard, request_for: Callable[..., PlanRequest]
) -> None:
    layout = plan(request_for(v32)).layouts[0]
    values = {f.name: getattr(layout, f.name) for f in fields(LayoutPlan)}
    assert new_layout_plan(dict(values)) == LayoutPlan(**values) == layout
    assert new_layout_plan({k: v for k, v in values.items() if k != "fits"}).fits is False  # a default fills in
    with pytest.raises(TypeError, match="missing \\['valid'\\]"):
        new_layout_plan({k: v for k, v in values.items() if k != "valid"})
    with pytest.raises(TypeError, match="unknown \\['fitz'\\]"):
        new_layout_plan(values | {"fitz": True})
    swapped = {k: v for k, v in values.items() if k != "valid"} | {"fitz": True}  # same count, wrong names
    with pytest.raises(TypeError, match="unknown \\['fitz'\\], missing \\['valid'\\]"):
        new_layout_plan(swapped)
    with pytest.raises(TypeError):
        LayoutPlan(**swapped)
