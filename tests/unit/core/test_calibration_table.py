"""Every public vLLM startup log the planner is checked against, as one table, and one test holding each row.

Each row: where the logged numbers come from, the settings of that run, what vLLM logged, and the
tolerance. The planner's numbers and the error are computed; a miss fails with the whole table, so
nothing is skipped. Target (issue 13): KV tokens within 2 % and weights within 1 % on current releases.
Public logs that cannot make a row: vLLM issue 31903 (V3.2 TP8·PP4, 1,214,464 tokens) states neither the
release, the GPU nor gpu_memory_utilization; vLLM issue 15928 is an AMD MI308 (not modelled); the Kimi-K2
recipe's DCP8 run (same file, lines 199–201) multiplies tokens by decode context parallel, which the planner
does not model; vLLM issue 14882 (R1 on 8×H200, PyTorch 2.5.1, March 2025) runs a pre-0.11 release (refused).
Searched for more rows on 2026-12-01 and 2026-12-02 (issues, pages and code corpora: "Available KV cache
memory" / "GPU KV cache size" / "Maximum concurrency for 163,840 tokens per request" with DeepSeek V3, R1,
V3.2, Kimi-K2 on H100, H200, B200, MI300X/MI355X, and repositories that commit raw vLLM logs). The B200
rows come from benchmark logs committed to ajith-sirra-amd/InferenceMAX_Rocm_Team (fixtures/calibration/
SOURCES.md). Near-misses: vLLM issue 30017 (V3.1-Terminus BF16, 0.12.0, A800, TP8·PP3: KV GiB only, the
engine crashed before sizing tokens); a Kimi-K2.5 8×H100 vLLM 0.15.0 setup log (quotes "Available KV cache
memory: 0.64 GiB" but profiles the vision tower in data-parallel mode, whose activation the planner does not
model); the same InferenceMAX repository's vLLM 0.21.0 MI355X logs of amd/Kimi-K2.5-MXFP4 (AMD Quark MXFP4,
not read by the planner).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from core_planner_inputs import KIMI_K2_THINKING
from meshdeck.core.model_card import model_card_from_config
from meshdeck.core.planner import plan
from meshdeck.core.units import GIB
from meshdeck.services.catalog import load_model

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "calibration"
KV_TOKENS_TOLERANCE = 0.02
WEIGHTS_TOLERANCE = 0.01


def _logged(file_name: str) -> dict[str, float]:
    """The numbers vLLM printed in a log excerpt."""
    text = (FIXTURES / file_name).read_text()
    numbers: dict[str, float] = {}
    patterns = {
        "weights_gib": r"Model loading took ([\d.]+) GiB",
        "kv_gib": r"Available KV cache memory: ([\d.]+) GiB",
        "kv_tokens": r"GPU KV cache size: ([\d,]+) tokens",
    }
    for key, pattern in patterns.items():
        match = re.search(pattern, text)
        if match:
            numbers[key] = float(match.group(1).replace(",", ""))
    return numbers


@dataclass(frozen=True)
class Row:
    source: str
    model: str
    settings: dict[str, Any]
    logged: dict[str, float]
    tolerances: dict[str, float] = field(
        default_factory=lambda: {"kv_tokens": KV_TOKENS_TOLERANCE, "weights_gib": WEIGHTS_TOLERANCE}
    )
    untested: str = ""  # why a logged number is reported (info) but not held to a tolerance


def kimi_k25_nvfp4() -> Any:
    """nvidia/Kimi-K2.5-NVFP4's config.json (KimiK25ForConditionalGeneration: Kimi-K2 text model + MoonViT)."""
    config = json.loads((FIXTURES / "kimi-k2.5-nvfp4_config.json").read_text())
    return model_card_from_config(config, "kimi-k2.5-nvfp4_config.json", "kimi-k2.5-nvfp4")


def deepseek_r1_fp4() -> Any:
    """nvidia/DeepSeek-R1(-0528)-FP4: ModelOpt NVFP4, attention and the MTP layer BF16 (tests/fixtures/checkpoints)."""
    return load_model(str(FIXTURES.parent / "checkpoints" / "deepseek-r1-fp4"))


def kimi_k25_int4() -> Any:
    """moonshotai/Kimi-K2.5 as it ships: Kimi-K2-Thinking's compressed-tensors int4 experts (its text_config)."""
    config = json.loads((FIXTURES / "kimi-k2.5-nvfp4_config.json").read_text())
    config["quantization_config"] = KIMI_K2_THINKING["quantization_config"]
    return model_card_from_config(config, "kimi-k2.5 (int4)", "kimi-k2.5")


def kimi_k25_mxfp4() -> Any:
    """amd/Kimi-K2.5-MXFP4 as far as its config is known (SOURCES.md: the exclude list is reconstructed)."""
    config = json.loads((FIXTURES / "kimi-k2.5-mxfp4_config.reconstructed.json").read_text())
    return model_card_from_config(config, "kimi-k2.5-mxfp4_config.reconstructed.json", "kimi-k2.5-mxfp4")


B200_K25 = {
    "gpu_name": "B200",
    "pipeline_parallel": 1,
    "data_parallel": 1,
    "expert_parallel": False,
    "kv_cache_dtype": "fp8",
    "vllm_version": (0, 22),
    "cudagraph_memory_estimate": False,  # the runs' VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0
}
VISION_PROFILE_UNMODELLED = (
    "Kimi-K2.5's profile pass also runs its vision tower on the largest dummy item, which the planner does not "
    "model beyond the encoder cache it leaves (8192 × 7168 BF16); these rows are off in both directions (B200 "
    "TP4 +7.8 %, TP8 +1.2 %, H100 0.26 GiB low), so the KV numbers are reported, not held"
)
ROCM_RESERVE_UNMODELLED = (
    "vLLM 0.21 on ROCm keeps 7.2-7.6 GiB per GPU out of the KV budget here (0.9 × 287.98 − weights − KV; "
    "0.45 GiB apart between hosts), the planner 2.6 GiB: besides the vision tower's pass (above), what ROCm's "
    "profile run adds (AITER MoE / MLA / all-reduce-fusion workspaces, RCCL) is not read from the source yet"
)
B200_R1 = {
    "gpu_name": "B200",
    "pipeline_parallel": 1,
    "data_parallel": 1,
    "expert_parallel": True,
    "kv_cache_dtype": "fp8",
    "vllm_version": (0, 19),
}
WEIGHTS_ONLY = {"weights_gib": WEIGHTS_TOLERANCE}
TP8 = {"tensor_parallel": 8, "pipeline_parallel": 1, "data_parallel": 1, "expert_parallel": False}
ROWS = (
    Row(
        "VLLM-FACTS.md public point: vLLM 0.16.0, 8×H200 (no log file: numbers as VLLM-FACTS.md quotes them)",
        "v32",
        {**TP8, "max_model_len": 16384, "gpu_memory_utilization": 0.85, "vllm_version": (0, 16)},
        {"weights_gib": 80.78, "kv_gib": 30.52, "kv_tokens": 418_304},
    ),
    Row(
        "vllm_log_v0.11.x_kimi-k2-thinking_deepseekv3-arch_8xH200_tp8_kv-cache_recipes.txt",
        "kimi_k2",
        {**TP8, "vllm_version": (0, 11)},
        _logged("vllm_log_v0.11.x_kimi-k2-thinking_deepseekv3-arch_8xH200_tp8_kv-cache_recipes.txt"),
    ),
    Row(
        "vllm_log_v0.19.1_deepseek-r1-0528-fp4_b200_tp8-ep_inferencex_excerpt.txt",
        "deepseek_r1_fp4",
        {**B200_R1, "gpus_per_node": 8, "tensor_parallel": 8},
        _logged("vllm_log_v0.19.1_deepseek-r1-0528-fp4_b200_tp8-ep_inferencex_excerpt.txt"),
    ),
    Row(
        "vllm_log_v0.19.1_deepseek-r1-0528-fp4_b200_tp4-ep_inferencex_excerpt.txt",
        "deepseek_r1_fp4",
        {**B200_R1, "gpus_per_node": 4, "tensor_parallel": 4},
        _logged("vllm_log_v0.19.1_deepseek-r1-0528-fp4_b200_tp4-ep_inferencex_excerpt.txt"),
    ),
    Row(
        "vllm_log_v0.22.0_kimi-k2.5-nvfp4_b200_tp4_inferencemax_excerpt.txt",
        "kimi_k25_nvfp4",
        {**B200_K25, "gpus_per_node": 4, "tensor_parallel": 4, "max_num_seqs": 16},
        _logged("vllm_log_v0.22.0_kimi-k2.5-nvfp4_b200_tp4_inferencemax_excerpt.txt"),
        tolerances=WEIGHTS_ONLY,
        untested=VISION_PROFILE_UNMODELLED,
    ),
    Row(
        "vllm_log_v0.22.0_kimi-k2.5-nvfp4_b200_tp8_inferencemax_excerpt.txt",
        "kimi_k25_nvfp4",
        {**B200_K25, "gpus_per_node": 8, "tensor_parallel": 8, "max_num_seqs": 4},
        _logged("vllm_log_v0.22.0_kimi-k2.5-nvfp4_b200_tp8_inferencemax_excerpt.txt"),
        tolerances=WEIGHTS_ONLY,
        untested=VISION_PROFILE_UNMODELLED,
    ),
    Row(
        "Kimi-K2.5 on 8×H100 setup log (stored file 31505324900: 'Available KV cache memory: 0.64 GiB' quoted "
        "from vLLM, '72.02 GiB per GPU' from its author's summary; no token count: the run stopped there)",
        "kimi_k25_int4",
        {
            **TP8,
            "gpu_name": "H100-SXM5-80GB",
            "gpu_memory_utilization": 0.95,
            "max_num_seqs": 64,
            "max_model_len": 16384,
            "mm_encoder_tp_mode": "data",
            "vllm_version": (0, 15),
        },
        {"weights_gib": 72.02, "kv_gib": 0.64},
        tolerances=WEIGHTS_ONLY,
        untested=VISION_PROFILE_UNMODELLED,
    ),
    Row(
        "vllm_log_v0.21.0_kimi-k2.5-mxfp4_mi355x_tp4_inferencemax_excerpt.txt",
        "kimi_k25_mxfp4",
        {
            "gpu_name": "MI355X",
            "gpus_per_node": 4,
            "tensor_parallel": 4,
            "pipeline_parallel": 1,
            "data_parallel": 1,
            "expert_parallel": False,
            "kv_cache_dtype": "fp8",
            "max_num_seqs": 4,
            "mm_encoder_tp_mode": "data",
            "vllm_version": (0, 21),
        },
        _logged("vllm_log_v0.21.0_kimi-k2.5-mxfp4_mi355x_tp4_inferencemax_excerpt.txt"),
        tolerances=WEIGHTS_ONLY,
        untested=ROCM_RESERVE_UNMODELLED,
    ),
)
CARDS = {
    "deepseek_r1_fp4": deepseek_r1_fp4,
    "kimi_k25_int4": kimi_k25_int4,
    "kimi_k25_nvfp4": kimi_k25_nvfp4,
    "kimi_k25_mxfp4": kimi_k25_mxfp4,
}


def _planned(layout: Any) -> dict[str, float]:
    return {
        "weights_gib": layout.weights_bytes_per_gpu / GIB,
        "kv_gib": layout.kv_budget_bytes_per_gpu / GIB,
        "kv_tokens": layout.kv_tokens_logged_per_replica,
    }


def test_every_calibration_row_is_within_its_tolerance(request_for, request):
    report, misses = [], []
    for row in ROWS:
        card = CARDS[row.model]() if row.model in CARDS else request.getfixturevalue(row.model)
        planned = _planned(plan(request_for(card, **row.settings)).layouts[0])
        for key, logged in row.logged.items():
            error = planned[key] / logged - 1
            tolerance = row.tolerances.get(key)
            verdict = f"info ({row.untested})" if tolerance is None else ("ok" if abs(error) <= tolerance else "MISS")
            line = f"{row.source} | {key}: logged {logged:g}, planned {planned[key]:.2f}, error {error:+.2%}"
            report.append(f"{line}, tolerance {tolerance if tolerance is None else f'{tolerance:.1%}'}: {verdict}")
            if verdict == "MISS":
                misses.append(line)
    assert not misses, "\n".join(report)


def test_the_table_reads_the_logged_numbers_from_the_fixture():
    assert ROWS[1].logged == {"kv_gib": 46.80, "kv_tokens": 715_072}
    logged = {row.source.split(" ")[0]: row.logged for row in ROWS}
    assert logged["vllm_log_v0.19.1_deepseek-r1-0528-fp4_b200_tp8-ep_inferencex_excerpt.txt"] == {
        "weights_gib": 48.13,
        "kv_gib": 108.18,
        "kv_tokens": 3_305_920,
    }
    assert logged["vllm_log_v0.22.0_kimi-k2.5-nvfp4_b200_tp4_inferencemax_excerpt.txt"] == {
        "weights_gib": 139.53,
        "kv_gib": 17.16,
        "kv_tokens": 524_480,
    }
    assert logged["vllm_log_v0.21.0_kimi-k2.5-mxfp4_mi355x_tp4_inferencemax_excerpt.txt"]["kv_tokens"] == 3_640_617
    assert len(ROWS) == len({row.source for row in ROWS})


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.source[:40])
def test_every_row_has_kv_numbers_and_names_its_settings(row):
    assert ("kv_tokens" in row.logged or "kv_gib" in row.logged) and "vllm_version" in row.settings
    assert ("kv_tokens" in row.tolerances) != bool(row.untested)  # a number left untested says why


def test_text_model_rows_hold_kv_on_two_gpu_kinds_and_three_releases():
    held = [row for row in ROWS if "kv_tokens" in row.tolerances]
    assert {row.settings.get("gpu_name", "H200-SXM-141GB") for row in held} == {"H200-SXM-141GB", "B200"}
    assert {row.settings["vllm_version"] for row in held} == {(0, 11), (0, 16), (0, 19)}
