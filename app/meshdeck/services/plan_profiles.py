"""A planned layout as deployment profiles: what the console's planner saves and `meshdeck plan --profile-out` writes.

One function turns a ranked layout into launch.profile mappings and validates them (the same checks a
profile file gets), so a profile made from the planner always launches the layout that was planned,
whichever front end made it. A layout of several independent instances becomes one profile per
instance (`<name>-1`, `<name>-2`, …, files `<stem>-1.yaml`, …); files are written atomically.

A torch layout must name the script its ranks run: without one the profile would fall back to the
built-in tiny test model while its `model:` says DeepSeek, and the operator would launch a toy believing
it was the real thing. The training settings of a `--mode train` plan (ZeRO stage, micro-batches,
activation checkpointing) have no field in the profile format, so no training plan is saved here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from meshdeck.core.errors import InputError
from meshdeck.core.layout_plan import LayoutPlan
from meshdeck.core.planner import PlanResult
from meshdeck.launch.profile import Profile, dump_profile, profile_from_mapping
from meshdeck.launch.torch_launch import BUILTIN_WORKLOADS
from meshdeck.services.files import open_output, output_target, several_files_problem

BUNDLED_MODEL_IDS = {
    "deepseek-v3.2": "deepseek-ai/DeepSeek-V3.2",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "deepseek-r1": "deepseek-ai/DeepSeek-R1",
}
PROFILE_NAME_LIMIT = 60  # leaves room for an instance suffix inside the profile's 64 characters
SCRIPT_NEEDED = (
    "a torch layout needs the script each rank runs: a path on the servers, or "
    f"{' / '.join(BUILTIN_WORKLOADS)} (built-in test workloads)"
)


def model_id_for(model: str) -> str:
    """What a profile should name: the Hugging Face id for a bundled card, else the path as given."""
    return BUNDLED_MODEL_IDS.get(model.strip().lower(), model)


def default_profile_name(result: PlanResult, layout: LayoutPlan) -> str:
    """`<model>-<layout label>` in lower case: `deepseek-v3.2-2x-tp1-dp8-ep` for "2× TP1·DP8·EP"; every run of
    characters a profile name cannot hold becomes one '-'."""
    text = f"{result.request.model.name}-{layout.label()}".lower().replace("×", "x")
    return re.sub(r"[^a-z0-9._-]+", "-", text).strip("-._")[:PROFILE_NAME_LIMIT]


def profile_mappings(
    layout: LayoutPlan,
    result: PlanResult,
    node_names: Sequence[str],
    name: str,
    model: str,
    script: str | None = None,
    script_args: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """One profile mapping (launch.profile format) per instance of `layout`, on its nodes' hosts.

    `script` (with `script_args`) is what every rank of a torch layout runs: a path on the servers or a
    built-in workload name (launch.torch_launch.BUILTIN_WORKLOADS). Raises InputError naming `script`
    when a torch layout has none or a vLLM layout has one, and naming `layout` when the layout packs
    several instances into one node: a profile has no field that pins GPUs, so those instances could
    not be launched side by side from profiles."""
    request, settings = result.request, result.settings
    torch_settings = _torch_settings(request.engine, script, script_args)
    placement = layout.placement
    if placement.instances > 1 and placement.gpus_per_instance < placement.gpus_per_node:
        raise InputError(
            "layout",
            f"{layout.label()} runs {placement.instances_per_node} instances per node; a profile cannot pin GPUs, "
            "so save a layout whose instances use whole nodes",
        )
    gpus_per_node = min(placement.gpus_per_instance, placement.gpus_per_node)
    mappings = []
    for instance in range(placement.instances):
        nodes = sorted({r.node for r in layout.rank_map if r.instance == instance})
        hosts = [node_names[n] if n < len(node_names) else f"node{n}" for n in nodes]
        suffix = f"-{instance + 1}" if placement.instances > 1 else ""
        mapping: dict[str, Any] = {
            "name": f"{name}{suffix}",
            "model": model,
            "engine": request.engine,
            "hosts": hosts,
            "gpus_per_node": gpus_per_node,
            "layout": {
                "tensor_parallel": layout.tensor_parallel,
                "pipeline_parallel": layout.pipeline_parallel,
                "data_parallel": layout.data_parallel,
                "expert_parallel": layout.expert_parallel,
            },
        }
        if request.engine == "vllm":
            mapping["vllm"] = {
                "max_model_len": settings.max_model_len,
                "gpu_memory_utilization": request.gpu_memory_utilization,
                "kv_cache_dtype": request.kv_cache_dtype,
                "max_num_seqs": settings.max_num_seqs_emitted,
                "speculative_mtp": request.mtp,
            }
            if request.mm_encoder_tp_mode != "weights":  # a profile has no field for it: the flag as vLLM takes it
                mapping["vllm"]["extra_args"] = ["--mm-encoder-tp-mode", request.mm_encoder_tp_mode]
        if torch_settings is not None:
            mapping["torch"] = dict(torch_settings)
        mappings.append(mapping)
    return mappings


def _torch_settings(engine: str, script: str | None, script_args: Sequence[str]) -> dict[str, Any] | None:
    """The profile's `torch:` section for a torch layout; None for vLLM, which runs no script."""
    if engine != "torch":
        if script is not None or script_args:
            raise InputError("script", f"only a torch layout runs a script; this layout is planned for {engine}")
        return None
    if script is None or not script.strip():
        raise InputError("script", SCRIPT_NEEDED)
    return {"script": script, "args": list(script_args)}


def profiles_from_layout(
    layout: LayoutPlan,
    result: PlanResult,
    node_names: Sequence[str],
    name: str,
    model: str,
    script: str | None = None,
    script_args: Sequence[str] = (),
) -> list[Profile]:
    """Validated profiles (one per instance). Raises InputError naming the field."""
    mappings = profile_mappings(layout, result, node_names, name, model, script, script_args)
    return [profile_from_mapping(m, source="profile") for m in mappings]


def instance_paths(target: Path, count: int) -> list[Path]:
    """Where `count` profiles exported to `target` go: the file itself for one, `<stem>-N<suffix>` for several."""
    target = Path(target)
    if count == 1:
        return [target]
    return [target.with_name(f"{target.stem}-{index + 1}{target.suffix}") for index in range(count)]


def write_profiles(profiles: Sequence[Profile], target: Path, header: str = "", option: str = "path") -> list[Path]:
    """Each profile as YAML (after `header`, comment lines) at instance_paths(target), each as `-o` writes
    (services/files.py: a regular file atomically, a pipe or device directly); the paths. Raises
    InputError naming `option` when the target cannot take them (a device for several files)."""
    paths = instance_paths(target, len(profiles))
    first = output_target(str(target), option=option)
    problem = several_files_problem(first, len(profiles), paths)
    if problem is not None:
        raise InputError(option, problem)
    for profile, path in zip(profiles, paths, strict=True):
        with open_output(first if path == target else output_target(str(path), option=option)) as stream:
            stream.write(header + dump_profile(profile))
    return paths
