"""The launcher's front door: profile + each node's network facts -> a LaunchPlan (vLLM or torchrun).

Also parses the compact layout spelling the CLI takes (`tp=2,pp=1,dp=2,ep`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from meshdeck.core.errors import InputError
from meshdeck.launch.disaggregated_launch import build_disaggregated_plan
from meshdeck.launch.network import NodeNetwork
from meshdeck.launch.plan import LaunchPlan, PlannedStartup
from meshdeck.launch.profile import Layout, Profile, validation_error_to_input_error
from meshdeck.launch.torch_launch import build_torch_plan
from meshdeck.launch.vllm_launch import build_vllm_plan

_LAYOUT_KEYS = {"tp": "tensor_parallel", "pp": "pipeline_parallel", "dp": "data_parallel"}


def build_launch_plan(
    profile: Profile,
    nodes: Sequence[NodeNetwork],
    *,
    run_id: str,
    planned: PlannedStartup | None = None,
) -> LaunchPlan:
    """Every command of the launch, in start order. Pure: nothing is contacted or started, and nothing
    depends on whether the agents simulate their GPUs."""
    if profile.disaggregated is not None:
        return build_disaggregated_plan(profile, nodes)
    if profile.engine == "vllm":
        return build_vllm_plan(profile, nodes, planned=planned)
    return build_torch_plan(profile, nodes, run_id=run_id)


def parse_layout_spec(spec: str, field: str = "--layout") -> Layout:
    """`tp=2,pp=1,dp=2` (any order; missing sizes are 1), plus `ep` or `ep=1` for expert parallel."""
    values: dict[str, int | bool] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        key, _, raw = part.partition("=")
        key = key.strip().lower()
        if key == "ep":
            if raw not in ("", "0", "1", "true", "false"):
                raise InputError(field, f"ep takes no value or 0/1, got {raw!r}")
            values["expert_parallel"] = raw in ("", "1", "true")
            continue
        if key not in _LAYOUT_KEYS:
            raise InputError(field, f"unknown size {key!r} in {spec!r}; use tp=, pp=, dp= and ep")
        if not raw.isdigit() or int(raw) < 1:
            raise InputError(field, f"{key} must be a positive integer, got {raw!r}")
        values[_LAYOUT_KEYS[key]] = int(raw)
    try:
        return Layout.model_validate(values)
    except ValidationError as exc:
        raise validation_error_to_input_error(exc, field) from None
