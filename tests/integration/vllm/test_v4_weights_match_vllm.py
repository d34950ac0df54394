"""meshdeck's DeepSeek-V4 weights (core.v4_weights) against the model vLLM 0.32.0 itself builds.

v4_weights_probe.py runs under the vLLM venv's python, builds vLLM's DeepseekV4ForCausalLM for meshdeck's tiny V4
(resources/vllm-models/tiny-deepseek-v4: 4 layers with compress ratios 0, 4, 128, 4, a hash layer, hc_mult 4, BF16)
at TP = 1 and lists every parameter and buffer. Every parameter name, shape and byte count must match meshdeck's, and
so must the totals per component and the rope caches. The quantized (FP8 + MXFP4) layout cannot be built whole on
vLLM's CPU build ("Failed to find a kernel that can implement the ScaledMM linear layer"), so the probe calls the
DeepSeek-V4 quantization method's create_weights on bare modules and those tensors are compared with meshdeck's.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from meshdeck.core.model_card import ModelCard, model_card_from_config
from meshdeck.core.v4_weights import BUFFER_COMPONENTS, V4Shard, by_component, layer_tensors, model_tensors
from meshdeck.services.vllm_local import tiny_model_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PROBE = Path(__file__).with_name("v4_weights_probe.py")


def _probe(vllm_executable: str, *args: str) -> dict[str, Any]:
    python = Path(vllm_executable).parent / "python"
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"}
    done = subprocess.run(
        [str(python), str(PROBE), *args], capture_output=True, text=True, timeout=600, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _card(model_dir: Path) -> ModelCard:
    return model_card_from_config(json.loads((model_dir / "config.json").read_text()), str(model_dir))


_DTYPES = {
    "bf16": "bfloat16",
    "fp32": "float32",
    "int32": "int32",
    "uint8": "uint8",
    "fp8": "float8_e4m3fn",
    "ue8m0": "float8_e8m0fnu",
}


def test_tiny_v4_bf16_parameters_match_vllms_model(vllm_executable: str) -> None:
    model_dir = tiny_model_dir("tiny-deepseek-v4")
    vllm = _probe(vllm_executable, str(model_dir))
    card = _card(model_dir)
    mine = model_tensors(card, V4Shard(weights="bf16", sink_padding=False))
    theirs = {r["name"]: r for r in vllm["tensors"] if r["kind"] == "parameter"}
    ours = {t.name: t for t in mine if t.parameter}
    assert sorted(theirs) == sorted(ours)
    for name, row in theirs.items():
        assert (tuple(row["shape"]), row["dtype"], row["bytes"]) == (
            ours[name].shape,
            _DTYPES[ours[name].dtype],
            ours[name].nbytes,
        ), name
    # the rope caches are vLLM's only buffers: one per distinct rope (sliding window, compressed)
    caches = sorted(r["bytes"] for r in vllm["tensors"] if r["kind"] == "buffer")
    assert caches == sorted(t.nbytes for t in mine if t.component == "rope_caches")
    assert vllm["total_bytes"] == sum(t.nbytes for t in mine)
    assert vllm["total_numel"] == sum(t.numel for t in mine)
    # per component, by vLLM's names mapped to meshdeck's components
    component_of = {t.name: t.component for t in mine}
    theirs_by_component: dict[str, int] = {}
    for name, row in theirs.items():
        theirs_by_component[component_of[name]] = theirs_by_component.get(component_of[name], 0) + row["bytes"]
    ours_by_component = {k: v for k, v in by_component(mine) if k not in BUFFER_COMPONENTS}
    assert theirs_by_component == ours_by_component


def test_fp8_linear_and_mxfp4_experts_match_the_v4_quant_methods_create_weights(
    vllm_executable: str, tmp_path: Path
) -> None:
    """The tiny model with DeepSeek's quantization_config (fp8, e4m3, ue8m0, 128x128 blocks) and its FP4 experts."""
    config = json.loads((tiny_model_dir("tiny-deepseek-v4") / "config.json").read_text())
    config["quantization_config"] = {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "scale_fmt": "ue8m0",
        "weight_block_size": [128, 128],
    }
    config["expert_dtype"] = "fp4"  # as DeepSeek ships V4 (the tiny model is bf16 and leaves it out)
    (tmp_path / "config.json").write_text(json.dumps(config))
    card = _card(tmp_path)
    shard = V4Shard(sink_padding=False, mxfp4_round=1)
    ours = {t.name: t for t in layer_tensors(card, shard, 1)}
    wq_b_out, wq_b_in = ours["attn.wq_b.weight"].shape
    experts, w13_rows, _ = ours["ffn.experts.routed_experts.w13_weight"].shape
    vllm = _probe(
        vllm_executable,
        str(tmp_path),
        "--quantized-linear",
        str(wq_b_out),
        str(wq_b_in),
        "--mxfp4-experts",
        str(experts),
        str(card.hidden_size),
        str(w13_rows // 2),
    )
    got = {r["name"]: (tuple(r["shape"]), r["dtype"], r["bytes"]) for r in vllm["tensors"]}
    want = {}
    for name in ("weight", "weight_scale_inv"):
        t = ours[f"attn.wq_b.{name}"]
        want[f"linear.{name}"] = (t.shape, _DTYPES[t.dtype], t.nbytes)
    for name in ("w13_weight", "w13_weight_scale", "w2_weight", "w2_weight_scale"):
        t = ours[f"ffn.experts.routed_experts.{name}"]
        want[f"experts.{name}"] = (t.shape, _DTYPES[t.dtype], t.nbytes)
    assert got == want
