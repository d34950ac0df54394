"""Any config.json, however hostile, either plans or is refused with one InputError naming a field (hypothesis).

The configs are real ones (DeepSeek-V3, V3.2 with its indexer, Kimi-K2.5 with its vision tower) with fields
replaced by what a file may hold: huge and negative integers, 4,000-digit integers, floats with NaN and
Infinity, strings, nested lists and objects, JSON nested past the recursion limit, and quantization configs
of every method with hostile group sizes and exclusion lists (regexes and globs built from metacharacters).
They go through the file layer (`load_model` on a checkpoint directory) and, when loaded, through a plan.
"""

from __future__ import annotations

import json
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from core_planner_inputs import make_cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from meshdeck.core.errors import InputError
from meshdeck.core.planner import PlanRequest, plan
from meshdeck.services.catalog import load_gpu_catalog, load_model

ROOT = Path(__file__).resolve().parents[3]
BASES = {
    "deepseek-v3": json.loads((ROOT / "app/meshdeck/resources/models/deepseek-v3.json").read_text()),
    "deepseek-v3.2": json.loads((ROOT / "app/meshdeck/resources/models/deepseek-v3.2.json").read_text()),
    "kimi-k2.5": json.loads((ROOT / "tests/fixtures/calibration/kimi-k2.5-nvfp4_config.json").read_text()),
}
FIELDS = sorted({key for config in BASES.values() for key in config} | {"index_topk", "q_lora_rank", "dynamic"})
GPU = next(gpu for gpu in load_gpu_catalog() if gpu.name == "H200-SXM-141GB")
DEEP = "__deeply_nested__"  # replaced in the JSON text by arrays nested `depth` deep

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**62, 10**4000, 10**9]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.just(DEEP),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
# exclusion entries: names, globs and regexes made of the characters that make them slow or invalid
entries = st.one_of(
    st.text(alphabet="model.layers.0123_self_attn*?[]!", max_size=24),
    st.text(alphabet=".*+?()[]|\\d{},0123^$ax", max_size=16).map(lambda text: "re:" + text),
    st.sampled_from(["re:(.*.*)*x$", "re:(", "re:.*.*.*.*x", "model.layers.1.self_attn*", "*", "re:.*"]),
)
entry_lists = st.one_of(st.lists(entries, max_size=6), values)
group_sizes = st.one_of(st.sampled_from([16, 32, 128]), scalars)
quantization_configs = st.one_of(
    st.none(),
    values,
    st.fixed_dictionaries(
        {"quant_method": st.just("fp8")}, optional={"weight_block_size": st.one_of(values, st.lists(scalars))}
    ),
    st.fixed_dictionaries(
        {
            "quant_method": st.just("compressed-tensors"),
            "config_groups": st.dictionaries(
                st.text(max_size=6),
                st.fixed_dictionaries(
                    {"weights": st.fixed_dictionaries({"num_bits": st.just(4), "group_size": group_sizes})}
                ),
                max_size=2,
            ),
        }
    ),
    st.fixed_dictionaries(
        {"quant_method": st.sampled_from(["awq", "gptq"]), "bits": st.just(4), "group_size": group_sizes},
        optional={
            "zero_point": scalars,
            "modules_to_not_convert": entry_lists,
            "modules_in_block_to_quantize": entry_lists,
            "dynamic": st.one_of(
                st.dictionaries(entries.map(lambda e: "-:" + e.removeprefix("re:")), st.just({})), values
            ),
        },
    ),
    st.fixed_dictionaries(
        {"quant_method": st.sampled_from(["modelopt", "modelopt_fp4"]), "quant_algo": st.just("NVFP4")},
        optional={"group_size": group_sizes, "ignore": entry_lists},
    ),
    st.fixed_dictionaries(
        {
            "quant_method": st.just("quark"),
            "global_quant_config": st.just(
                {"weight": {"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0"}}
            ),
        },
        optional={"exclude": entry_lists},
    ),
)
hostile_configs = st.builds(
    lambda base, changes, quant, depth: (base, changes, quant, depth),
    base=st.sampled_from(sorted(BASES)),
    changes=st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), values, max_size=4),
    quant=quantization_configs,
    depth=st.sampled_from([3, 500, 100_000]),
)


def _config_text(base: str, changes: dict[str, Any], quant: Any, depth: int) -> str:
    config = json.loads(json.dumps(BASES[base]))
    config.update(changes)
    target = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    if quant is not None or "quantization_config" in config:
        config["quantization_config"] = quant
        if target is not config:
            target.pop("quantization_config", None)
    return json.dumps(config, allow_nan=True).replace(json.dumps(DEEP), "[" * depth + "]" * depth)


@settings(
    max_examples=150,
    deadline=timedelta(seconds=10),  # a hang detector: an example takes milliseconds
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(hostile_configs)
def test_a_hostile_config_plans_or_is_refused_naming_a_field(example):
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "config.json").write_text(_config_text(*example))
        try:
            card = load_model(folder)
        except InputError as refused:
            assert refused.field and refused.problem and "\n" not in str(refused)
            assert refused.field == "--model" or refused.field.startswith(str(Path(folder) / "config.json"))
            assert len(str(refused)) < 2000
            return
    try:
        plan(PlanRequest(card, make_cluster(GPU, 1, 8)))
    except InputError as refused:
        assert refused.field and "\n" not in str(refused)
