"""Model cards and GPU specs from files: the bundled resources, a user's config.json or checkpoint dir.

This is the planner's only door to the disk. `--model` accepts a bundled name (deepseek-v3.2,
deepseek-v3, deepseek-r1, deepseek-v4-pro, deepseek-v4-flash), a config.json path, or a checkpoint directory that holds one.
`--topology` accepts `nvidia-smi topo -m` text or an agent inventory JSON (decoded with the agent's own
record, meshdeck_agent.wire_inventory). Every failure is an
InputError naming the file or flag and what is allowed.

`detected_gpu` is the one way from a GPU an agent reported (NVML name, exact memory) to a GpuSpec:
the console's planner, the CLI's `plan --topology` and the launch's planned-vs-measured prediction
all use it, so they plan on the same spec.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from meshdeck_agent.wire_inventory import Inventory, InventoryError

from meshdeck.core.cluster import NodeTopology, parse_nvidia_smi_topology
from meshdeck.core.errors import InputError
from meshdeck.core.gpu_spec import GpuSpec, gpu_from_memory, gpus_from_catalog, match_catalog_gpu
from meshdeck.core.model_card import ModelCard, model_card_from_config
from meshdeck.core.units import GIB

MAX_CONFIG_BYTES = 1024 * 1024
BUNDLED_MODELS = {
    "deepseek-v3.2": "deepseek-v3.2.json",
    "deepseek-v3": "deepseek-v3.json",
    "deepseek-r1": "deepseek-v3.json",  # R1 shares V3's architecture and config
    "deepseek-v4-pro": "deepseek-v4-pro.json",  # deepseek-ai/DeepSeek-V4-Pro's config.json
    "deepseek-v4-flash": "deepseek-v4-flash.json",  # deepseek-ai/DeepSeek-V4-Flash's config.json
}


def _resources() -> Any:
    return resources.files("meshdeck") / "resources"


def _read_json(path: Path, label: str) -> Any:
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InputError(label, f"cannot read {path}: {exc.strerror or exc}") from None
    if size > MAX_CONFIG_BYTES:
        raise InputError(label, f"{path} is {size} bytes; a config.json is far smaller (limit {MAX_CONFIG_BYTES})")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(label, f"cannot read {path}: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            label, f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except RecursionError:
        raise InputError(
            label, f"{path} nests JSON too deeply to be a config (past Python's recursion limit)"
        ) from None
    except ValueError as exc:  # an integer past Python's digit limit (sys.get_int_max_str_digits)
        raise InputError(label, f"{path} holds a value Python cannot read: {exc}") from None


def bundled_model_names() -> tuple[str, ...]:
    return tuple(BUNDLED_MODELS)


@lru_cache(maxsize=8)
def _bundled(name: str) -> ModelCard:
    resource = _resources() / "models" / BUNDLED_MODELS[name]
    data = json.loads(resource.read_text(encoding="utf-8"))
    return model_card_from_config(data, source=f"resources/models/{BUNDLED_MODELS[name]}", name=name)


def load_model(spec: str) -> ModelCard:
    """A bundled model name, a config.json path, or a checkpoint directory holding config.json."""
    key = spec.strip().lower()
    if key in BUNDLED_MODELS:
        return _bundled(key)
    data, source, name = load_model_config(spec)
    return model_card_from_config(data, source=source, name=name)


def load_model_config(spec: str) -> tuple[dict[str, Any], str, str | None]:
    """The parsed config.json of `spec` (bundled name, config.json path or checkpoint directory), where it was read
    and the model's name — for callers that need more of the file than the card holds (the model's dtype)."""
    key = spec.strip().lower()
    if key in BUNDLED_MODELS:
        resource = _resources() / "models" / BUNDLED_MODELS[key]
        return dict(json.loads(resource.read_text(encoding="utf-8"))), f"resources/models/{BUNDLED_MODELS[key]}", key
    path = Path(spec).expanduser()
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise InputError("--model", f"{spec} is a directory without a config.json")
    elif not path.is_file():
        names = ", ".join(BUNDLED_MODELS)
        raise InputError(
            "--model", f"{spec!r} is neither a bundled model ({names}) nor a config.json or checkpoint directory"
        )
    data = _read_json(path, "--model")
    if not isinstance(data, dict):
        raise InputError(str(path), f"config.json must be a JSON object, got {type(data).__name__}")
    legacy = path.parent / "hf_quant_config.json"
    if data.get("quantization_config") is None and legacy.is_file():
        # ModelOpt's legacy export keeps {"quantization": {...}} beside config.json; vLLM reads it from there
        # (quant_method "modelopt"), and so does the planner.
        quant = _read_json(legacy, "--model")
        if not isinstance(quant, dict):
            raise InputError("--model", f"{legacy} must hold a JSON object")
        data["quantization_config"] = {"quant_method": "modelopt", **quant}
    name = path.parent.name if path.name == "config.json" else path.stem
    return data, str(path), name or None


@lru_cache(maxsize=1)
def load_gpu_catalog() -> tuple[GpuSpec, ...]:
    data = json.loads((_resources() / "gpus.json").read_text(encoding="utf-8"))
    return gpus_from_catalog(data, source="resources/gpus.json")


def detected_gpu(
    name: str | None, memory_bytes: int | None, catalog: Sequence[GpuSpec] | None = None, *, field: str = "gpu"
) -> GpuSpec:
    """The spec of a GPU an agent reported: its catalog entry when the model word and the memory agree
    (`core.gpu_spec.match_catalog_gpu`: "NVIDIA H200", 141 GB -> H200-SXM-141GB with the exact bytes),
    else a GPU known by its memory alone (`assumed`: its bandwidths are guesses, and every number derived
    from them says so). Raises InputError naming `field` when neither a known name nor a memory size is given.
    """
    specs = load_gpu_catalog() if catalog is None else tuple(catalog)
    found = match_catalog_gpu(name or "", memory_bytes, specs) if name else None
    if found is not None:
        return found
    if memory_bytes:
        return gpu_from_memory(memory_bytes / GIB, name=name)
    raise InputError(field, f"cannot tell the GPU model: the agent reported name {name!r} and no memory size")


def load_topology(path_text: str) -> tuple[NodeTopology | None, Inventory | None]:
    """`nvidia-smi topo -m` text, or an agent inventory JSON (decoded as the app decodes an agent's answer;
    it also tells GPU memory and NIC speed: plan it with services.cluster.cluster_from_inventories)."""
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise InputError("--topology", f"{path_text} is not a file")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise InputError("--topology", f"{path_text} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError("--topology", f"cannot read {path_text}: {exc}") from None
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError("--topology", f"{path_text} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
        except RecursionError:
            raise InputError("--topology", f"{path_text} nests JSON too deeply to be an inventory") from None
        try:
            inventory = Inventory.from_wire(data)
        except InventoryError as exc:
            raise InputError(f"--topology {path_text}: {exc.path}", exc.problem) from None
        return None, inventory
    return parse_nvidia_smi_topology(text, source=path_text), None
