"""The parameters of Kimi-K2.5's MoonViT vision tower and projector, as vLLM builds them, split by how TP holds them.

vLLM 0.22.0 (model_executor/models/kimi_k25_vit.py, kimi_k25.py; transformers_utils/configs/kimi_k25.py):
- every encoder block has two LayerNorms, `wqkv` (QKVParallelLinear, bias), `wo` (RowParallelLinear, bias)
  and an MLP `fc0` (ColumnParallelLinear, bias) / `fc1` (RowParallelLinear, bias). With the default
  `--mm-encoder-tp-mode weights` the four weight matrices and the column-split biases are divided over
  the TP ranks; a row-split layer's bias is whole on every rank (RowParallelLinear);
- the patch embedding (Conv2d patch×patch×3 → hidden, bias), the learned 2-D position embedding
  (init_pos_emb_height × init_pos_emb_width × hidden) and the final LayerNorm are on every rank;
- the projector (`mm_projector`, patch merger) is a LayerNorm over the vision hidden size, then
  ReplicatedLinear(merged, merged) and ReplicatedLinear(merged, text hidden), merged = kernel_h × kernel_w
  × hidden: on every rank;
- every piece is BF16 whatever the checkpoint's format (NVIDIA's and AMD's Kimi-K2.5 checkpoints list the
  vision tower and projector as unquantized) and the tower is built on every pipeline stage.
vLLM's config class reads `hidden_size`, `num_hidden_layers`, `intermediate_size`, `patch_size`,
`init_pos_emb_height/width` and `merge_kernel_size` with the defaults below (the checkpoint's own `vt_*`
keys are not read; its values equal these defaults), so the same keys and defaults are read here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from meshdeck.core.config_limits import VISION_LIMITS, bounded_int, shown
from meshdeck.core.errors import InputError

VISION_DEFAULTS = {
    "hidden_size": 1152,
    "num_hidden_layers": 27,
    "intermediate_size": 4304,
    "patch_size": 14,
    "init_pos_emb_height": 64,
    "init_pos_emb_width": 64,
}
DEFAULT_MERGE_KERNEL = (2, 2)
IMAGE_CHANNELS = 3


@dataclass(frozen=True)
class VisionTowerParams:
    split_over_tp: int
    replicated: int

    @property
    def total(self) -> int:
        return self.split_over_tp + self.replicated


def _size(config: Mapping[str, Any], key: str, field: str) -> int:
    return bounded_int(config.get(key, VISION_DEFAULTS[key]), f"{field}.{key}", VISION_LIMITS[key])


def _merge_kernel(config: Mapping[str, Any], field: str) -> tuple[int, int]:
    key = "merge_kernel_size"
    value = config.get(key, DEFAULT_MERGE_KERNEL)
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= VISION_LIMITS[key] for v in value)
    ):
        raise InputError(
            f"{field}.{key}", f"must be [height, width], each at most {VISION_LIMITS[key]}, got {shown(value)}"
        )
    return int(value[0]), int(value[1])


def vision_tower_params(config: Any, text_hidden_size: int, field: str) -> VisionTowerParams:
    """Parameter counts of the tower + projector a `vision_config` describes (None: vLLM's defaults)."""
    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        raise InputError(field, f"must be an object, got {type(config).__name__}")
    h = _size(config, "hidden_size", field)
    layers = _size(config, "num_hidden_layers", field)
    mlp = _size(config, "intermediate_size", field)
    patch = _size(config, "patch_size", field)
    pos_h, pos_w = _size(config, "init_pos_emb_height", field), _size(config, "init_pos_emb_width", field)
    kernel_h, kernel_w = _merge_kernel(config, field)
    # wqkv weight + bias, wo weight, fc0 weight + bias, fc1 weight: divided over TP
    block_split = 3 * h * h + 3 * h + h * h + mlp * h + mlp + h * mlp
    # wo and fc1 biases (row-split layers keep the whole bias) and two LayerNorms (weight + bias)
    block_whole = h + h + 2 * 2 * h
    merged = kernel_h * kernel_w * h
    projector = 2 * h + merged * merged + merged + text_hidden_size * merged + text_hidden_size
    embeddings = IMAGE_CHANNELS * patch * patch * h + h + pos_h * pos_w * h
    final_norm = 2 * h
    return VisionTowerParams(
        split_over_tp=layers * block_split,
        replicated=layers * block_whole + embeddings + final_norm + projector,
    )
