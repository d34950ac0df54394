"""Which vLLM releases serve DeepSeek-V4 (DeepseekV4ForCausalLM), and what its `vllm serve` front end is.

A release serves an architecture when its model registry maps the name to a model class; an older release
refuses the checkpoint at startup ("Model architectures ['DeepseekV4ForCausalLM'] are not supported"), so the
planner refuses `--vllm-version` older than the first one instead of planning a launch that cannot start.

Read from the release wheels (pip download vllm==X.Y.Z --no-deps):

- 0.19.1 (the last 0.19): vllm/model_executor/models/registry.py has no DeepseekV4 entry (lines 97-98 end the
  DeepSeek family at DeepseekV32ForCausalLM) and the wheel holds no deepseek_v4 file.
- 0.20.0: vllm/model_executor/models/registry.py 99 "DeepseekV4ForCausalLM": ("deepseek_v4", ...) and 590
  "DeepSeekV4MTPModel": ("deepseek_v4_mtp", "DeepSeekV4MTP"); vllm/config/model.py 569-570 defaults
  tokenizer_mode to "deepseek_v4" for the architecture; vllm/tokenizers/registry.py 45 "deepseek_v4";
  vllm/reasoning/__init__.py 31 and vllm/tool_parsers/__init__.py 37 register "deepseek_v4"; vllm/config/
  speculative.py 301-305 turns a deepseek_v4 target into a DeepSeekV4MTPModel draft for method "mtp".
  vLLM's v0.20.0 release notes say the same ("Initial DeepSeek V4 support landed (#40860)",
  https://github.com/vllm-project/vllm/releases/tag/v0.20.0), as does vLLM's recipe
  (https://recipes.vllm.ai/deepseek-ai/DeepSeek-V4-Pro: "vLLM 0.20.0+"). The v0.23.0 notes' "following its
  introduction in v0.22.0" refers to the 0.22 reorganisation into vllm/models/deepseek_v4/, not to the first
  release that loads the model.
- 0.32.0 (installed CPU build): vllm/model_executor/models/registry.py 96 maps it to vllm.models.deepseek_v4.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshdeck.core.errors import InputError
from meshdeck.core.model_card import ModelCard
from meshdeck.core.vllm_releases import Release, release_text

V4_ARCHITECTURE = "DeepseekV4ForCausalLM"


@dataclass(frozen=True)
class FirstServingRelease:
    """The first vLLM release whose model registry serves an architecture, and where that was read."""

    architecture: str
    first: Release
    last_without: Release  # the newest release read that does not register it
    source: str


V4_FIRST_SERVING = FirstServingRelease(
    architecture=V4_ARCHITECTURE,
    first=(0, 20),
    last_without=(0, 19),
    source=(
        "vLLM 0.20.0 vllm/model_executor/models/registry.py 99 registers DeepseekV4ForCausalLM (0.19.1's has none); "
        "release notes v0.20.0: 'Initial DeepSeek V4 support landed (#40860)'"
    ),
)

FIRST_SERVING_RELEASES: tuple[FirstServingRelease, ...] = (V4_FIRST_SERVING,)


def first_serving_release(card: ModelCard) -> FirstServingRelease | None:
    """The first release serving this card's architecture when meshdeck knows one later than every modelled
    release's (None: every modelled release serves it)."""
    for entry in FIRST_SERVING_RELEASES:
        if card.architecture == entry.architecture or (entry.architecture == V4_ARCHITECTURE and card.is_v4):
            return entry
    return None


def check_release_serves(card: ModelCard, version: Release, picker: str = "--vllm-version") -> None:
    """Refuse a vLLM release that cannot load this model, naming what picks the release (`picker`: the CLI's
    `--vllm-version`, the console's release in the planner form) and the first that can."""
    entry = first_serving_release(card)
    if entry is None or version >= entry.first:
        return
    raise InputError(
        picker,
        f"{release_text(version)} cannot serve {card.name}: vLLM's model registry has {entry.architecture} from "
        f"{release_text(entry.first)} on (not in {release_text(entry.last_without)}); pick {picker} "
        f"{_modelled(card, entry.first)}",
    )


def _modelled(card: ModelCard, first: Release) -> str:
    """What to pick instead: the releases whose V4 KV sizing is modelled (core.v4_kv), else the first serving one."""
    if card.is_v4:
        from meshdeck.core.v4_kv import v4_kv_modelled_ranges  # v4_kv reads card shapes; keep this module light

        return f"from the modelled ranges {v4_kv_modelled_ranges()}"
    return f"{release_text(first)} or newer"
