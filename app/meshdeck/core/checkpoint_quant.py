"""Which linear layers a quantized checkpoint stores in which format, read the way vLLM 0.33 reads its config.

A checkpoint's `quantization_config` names a method and, for most methods, a list of modules it leaves
unquantized. vLLM decides per module prefix (`model.layers.<i>.self_attn.q_b_proj`, `...mlp.experts`)
whether the layer gets the quantized method or UnquantizedLinearMethod (BF16); this module applies the
same matching to every quantizable module of a DeepSeek-V3 model and reduces the result to what the
planner counts: the component families the checkpoint quantizes, and the decoder layers it leaves BF16
as a whole. A list the planner cannot express that way (a family quantized in some layers only) is
refused naming the field, never approximated. The lists are compiled once and matched in bounded time
(module_match.py, regex_cost.py): a list or pattern past its bound is refused naming it before matching starts.

vLLM 0.33 sources (vllm/model_executor/layers/quantization/):
- auto_awq.py AutoAWQConfig.get_quant_method: `modules_to_not_convert` matched as substrings
  (is_layer_skipped(..., match_mode="substring")); `zero_point` says whether qzeros exist.
- auto_gptq.py AutoGPTQConfig / utils/gptq_utils.py get_linear_quant_method: `dynamic` rules starting
  "-:" are regexes (re.match) of modules left unquantized; a non-empty `modules_in_block_to_quantize`
  lists (as substrings) the only modules quantized. qzeros are always allocated.
- quark/quark.py QuarkConfig.get_quant_method → quark/utils.py should_ignore_layer: `exclude` entries equal to
  the module prefix or, written `re:<regex>`, re.match-ing it (a fused layer is skipped when its shards are).
- modelopt.py ModelOptQuantConfigBase.is_layer_excluded: `exclude_modules` (legacy hf_quant_config.json)
  or `ignore` matched exactly, as substrings and as fnmatch wildcards, after apply_vllm_mapper turned
  each `path*` into `path` and `path.*`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from meshdeck.core.config_limits import GROUP_LIMIT, bounded_int, shown
from meshdeck.core.errors import InputError
from meshdeck.core.module_match import MAX_MATCH_WORK, NameMatcher, entry_list
from meshdeck.core.regex_cost import NameShape

MXFP4_GROUP = 32  # OCP MX block: one e8m0 scale per 32 values

# Component families the planner counts (weights.py): the MLA projections one by one (checkpoints treat
# them differently, e.g. NVIDIA's "v2" FP4 checkpoints quantize o_proj only), V3.2's indexer wq_b, the dense
# MLP of the first layers, shared experts and routed experts. Norms, embeddings, lm_head, the router and
# the indexer's wk/weights_proj are BF16 in every format.
FAMILIES = (
    "fused_qkv_a",
    "q_b_proj",
    "kv_b_proj",
    "o_proj",
    "indexer",
    "dense_mlp",
    "shared_experts",
    "routed_experts",
)

# The HF module names of each family in one decoder layer (what exclusion lists name).
_ATTENTION_MODULES = {
    "fused_qkv_a": ("self_attn.q_a_proj", "self_attn.kv_a_proj_with_mqa"),
    "q_b_proj": ("self_attn.q_b_proj",),
    "kv_b_proj": ("self_attn.kv_b_proj",),
    "o_proj": ("self_attn.o_proj",),
}
_NO_Q_LORA_MODULES = {"fused_qkv_a": ("self_attn.kv_a_proj_with_mqa",), "q_b_proj": ("self_attn.q_proj",)}
_MLP = ("gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class ModelShape:
    """The few config fields that say which modules each layer has."""

    num_hidden_layers: int
    num_nextn_predict_layers: int
    has_q_lora: bool
    has_indexer: bool

    moe_layers: frozenset[int]
    module_prefix: str = ""  # what vLLM puts before `model.layers.<i>` (a multimodal model: "language_model.")


def layer_modules(shape: ModelShape, layer: int) -> dict[str, tuple[str, ...]]:
    """Family -> the HF module prefixes of `layer` (model.layers.<layer>.…) that vLLM quantizes or not."""
    base = f"{shape.module_prefix}model.layers.{layer}."
    families: dict[str, tuple[str, ...]] = {}
    for family, names in _ATTENTION_MODULES.items():
        if not shape.has_q_lora and family in _NO_Q_LORA_MODULES:
            names = _NO_Q_LORA_MODULES[family]
        families[family] = tuple(base + n for n in names)
    if shape.has_indexer:
        families["indexer"] = (base + "self_attn.indexer.wq_b",)
    if layer in shape.moe_layers:
        families["shared_experts"] = tuple(f"{base}mlp.shared_experts.{n}" for n in _MLP)
        families["routed_experts"] = (base + "mlp.experts",)
    else:
        families["dense_mlp"] = tuple(f"{base}mlp.{n}" for n in _MLP)
    return families


@dataclass(frozen=True)
class Exclusions:
    """What a checkpoint leaves BF16: families in every layer, and whole layers."""

    unquantized_families: tuple[str, ...]
    unquantized_layers: tuple[int, ...]  # decoder layer indices; num_hidden_layers is the MTP layer


def quark_mxfp4_group(quant: Mapping[str, Any], field: str) -> int:
    """The scale group of a Quark OCP MXFP4 checkpoint (weights fp4 per_group, e8m0 scales), else InputError.

    vLLM 0.22 quark.py _is_ocp_mx / schemes/quark_ocp_mx.py: weight dtype "fp4", qscheme "per_group",
    group_size 32 (OCP_MX_BLOCK_SIZE), uint8 weights holding two e2m1 values and a uint8 e8m0 scale per 32."""
    where = f"{field}.global_quant_config.weight"
    global_config = quant.get("global_quant_config")
    weight = global_config.get("weight") if isinstance(global_config, Mapping) else None
    if not isinstance(weight, Mapping):
        raise InputError(where, "missing; a Quark checkpoint describes its weight quantization there")
    if quant.get("layer_quant_config") or quant.get("layer_type_quant_config"):
        raise InputError(f"{field}.layer_quant_config", "per-layer Quark schemes are not modelled; allowed: none")
    shape = (weight.get("dtype"), weight.get("qscheme"), weight.get("group_size"))
    if shape != ("fp4", "per_group", MXFP4_GROUP) or weight.get("scale_format", "e8m0") != "e8m0":
        raise InputError(
            where,
            f"dtype {shown(shape[0])}, qscheme {shown(shape[1])}, group_size {shown(shape[2])} is not modelled; "
            "allowed: OCP MXFP4 "
            f"(dtype 'fp4', qscheme 'per_group', group_size {MXFP4_GROUP}, scale_format 'e8m0')",
        )
    return MXFP4_GROUP


def exclusions(shape: ModelShape, skipped: NameMatcher, field: str) -> Exclusions:
    """Apply `skipped(module_prefix) -> bool` to every quantizable module and reduce it to families and layers.

    A layer whose every quantizable module is skipped is a BF16 layer; in the other main layers each
    family must be skipped everywhere or nowhere (the planner prices one format per family). The MTP layer
    (index num_hidden_layers) either is skipped whole or follows the main layers. Before any matching, the
    matcher's bound over these names (module_match.py) must stay under MAX_MATCH_WORK, else `field` is refused.
    """
    layers = shape.num_hidden_layers + (1 if shape.num_nextn_predict_layers else 0)
    modules_by_layer = [layer_modules(shape, layer) for layer in range(layers)]
    names = [name for modules in modules_by_layer for family in modules.values() for name in family]
    work = skipped.work(NameShape.of(names)) * len(names)
    if work > MAX_MATCH_WORK:
        raise InputError(
            field,
            f"its exclusion patterns may take up to {work:.2g} steps over the {len(names)} module names of this "
            f"{layers}-layer model (limit {MAX_MATCH_WORK:.2g}); use fewer or simpler patterns",
        )
    whole: list[int] = []
    per_family: dict[str, set[int]] = {}
    present: dict[str, set[int]] = {}
    for layer, modules in enumerate(modules_by_layer):
        decided = {family: [bool(skipped(m)) for m in names] for family, names in modules.items()}
        if all(all(v) for v in decided.values()):
            whole.append(layer)
            continue
        for family, values in decided.items():
            if any(values) and not all(values):
                raise InputError(
                    field,
                    f"leaves part of layer {layer}'s {family} unquantized ({', '.join(modules[family])}); "
                    "vLLM requires the shards of one fused layer to share a format",
                )
            if layer < shape.num_hidden_layers:
                present.setdefault(family, set()).add(layer)
                if values[0]:
                    per_family.setdefault(family, set()).add(layer)
    unquantized: list[str] = []
    for family in FAMILIES:
        skipped_in = per_family.get(family, set())
        if not skipped_in:
            continue
        if skipped_in != present.get(family, set()):
            some = ", ".join(str(i) for i in sorted(skipped_in)[:8])
            raise InputError(
                field,
                f"leaves {family} unquantized in some layers only ({some}{'…' if len(skipped_in) > 8 else ''}); "
                "the planner models a format per component family, or whole BF16 layers",
            )
        unquantized.append(family)
    return Exclusions(tuple(unquantized), tuple(whole))


def modelopt_fields(quant: Mapping[str, Any], field: str) -> tuple[str, int, list[str]]:
    """(quant_algo, group_size, exclusion list) of a ModelOpt config, nested (hf_quant_config.json) or flat."""
    nested = quant.get("quantization")
    if isinstance(nested, Mapping):
        algo, group, excluded = nested.get("quant_algo"), nested.get("group_size"), nested.get("exclude_modules")
        where = f"{field}.quantization"
    else:
        algo, group = quant.get("quant_algo"), quant.get("group_size")
        excluded = quant.get("ignore", quant.get("exclude_modules"))
        where = field
    if not isinstance(algo, str):
        raise InputError(f"{where}.quant_algo", f"missing; allowed: 'NVFP4' (got {shown(algo)})")
    if group is None:
        group = 16  # ModelOptNvFp4Config's default
    group = bounded_int(group, f"{where}.group_size", GROUP_LIMIT)
    return algo.upper(), group, entry_list(excluded, f"{where}.exclude_modules")
