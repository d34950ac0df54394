"""Which bundled card a profile's model id or path is: the launch's planned-vs-measured prediction plans with it."""

from __future__ import annotations

import pytest
from meshdeck.services.deployments.targets import bundled_model_for


@pytest.mark.parametrize(("model", "card"), [
    ("deepseek-ai/DeepSeek-V3.2", "deepseek-v3.2"),
    ("/models/DeepSeek-R1-0528", "deepseek-v3"),
    ("deepseek-ai/DeepSeek-V4-Pro", "deepseek-v4-pro"),
    ("/models/DeepSeek-V4-Flash/", "deepseek-v4-flash"),
    ("sgl-project/DeepSeek-V4-Flash-FP8", None),  # FP8 experts: not the bundled card's FP4 ones
    ("deepseek-ai/DeepSeek-V4", None),  # which V4? no prediction rather than the wrong model's
    ("deepseek-ai/DeepSeek-V4.1-Flash", None),  # V4.1 is its own architecture (DeepseekV41ForCausalLM)
    ("Qwen/Qwen3-235B-A22B", None),
])  # fmt: skip
def test_a_profiles_model_names_its_bundled_card(model: str, card: str | None) -> None:
    assert bundled_model_for(model) == card
