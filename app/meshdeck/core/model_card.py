"""The shape of a DeepSeek-V3-architecture model, read from its Hugging Face `config.json`.

Everything the planner counts — weights per component, KV bytes per token, traffic per token —
derives from these numbers, so a user can point `--model` at any DeepseekV3 / DeepseekV32 checkpoint
(DeepSeek-V3, R1, V3.1, V3.2, Kimi-K2 …) and get the right answer for *that* config, not a table
typed in for one model. A config that is not this architecture is refused naming `architectures`; a size
past its physical bound (config_limits.py) is refused naming its field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from meshdeck.core.checkpoint_quant import FAMILIES, ModelShape, exclusions, modelopt_fields, quark_mxfp4_group
from meshdeck.core.config_limits import FIELD_LIMITS, GROUP_LIMIT, bounded_int, shown
from meshdeck.core.errors import InputError
from meshdeck.core.module_match import (
    NameMatcher,
    entry_list,
    gptq_matcher,
    modelopt_matcher,
    quark_matcher,
    substrings,
)
from meshdeck.core.text import printable
from meshdeck.core.v4_shape import COMPRESS_RATIOS, EXPERT_DTYPES, V4Shape
from meshdeck.core.vision_tower import vision_tower_params

SUPPORTED_ARCHITECTURES = ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM")
V4_ARCHITECTURE = "DeepseekV4ForCausalLM"
# Multimodal checkpoints whose language model is a DeepSeek-V3 model under `text_config`, and the prefix vLLM
# gives that language model's modules (what a checkpoint's exclusion list names).
MULTIMODAL_ARCHITECTURES = {"KimiK25ForConditionalGeneration": "language_model."}

# How the checkpoint stores its linear layers (what `--weights-dtype auto`/the shipped format means).
CHECKPOINT_FP8_BLOCK = "fp8"  # e4m3 weights, fp32 (or ue8m0) scale per 128x128 block; DeepSeek's release
CHECKPOINT_BF16 = "bf16"  # no quantization_config
CHECKPOINT_INT4 = "int4"  # weight-only int4: compressed-tensors W4A16 experts (Kimi-K2-Thinking), AWQ, GPTQ
CHECKPOINT_NVFP4 = "nvfp4"  # ModelOpt NVFP4: e2m1 weights, an fp8 e4m3 scale per 16 inputs, fp32 global scales
CHECKPOINT_MXFP4 = "mxfp4"  # AMD Quark OCP MXFP4: e2m1 weights, an e8m0 scale per 32 inputs


@dataclass(frozen=True)
class ModelCard:
    """One DeepSeek-V3-architecture model. Field names follow config.json."""

    name: str
    source: str
    architecture: str
    model_type: str
    hidden_size: int
    num_hidden_layers: int
    first_k_dense_replace: int
    moe_layer_freq: int
    intermediate_size: int
    moe_intermediate_size: int
    n_routed_experts: int
    n_shared_experts: int
    num_experts_per_tok: int
    n_group: int
    topk_group: int
    num_attention_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    vocab_size: int
    max_position_embeddings: int
    num_nextn_predict_layers: int
    tie_word_embeddings: bool
    index_n_heads: int  # V3.2 lightning indexer; 0 when the model has none
    index_head_dim: int
    index_topk: int
    checkpoint_dtype: (
        str  # CHECKPOINT_FP8_BLOCK | CHECKPOINT_BF16 | CHECKPOINT_INT4 | CHECKPOINT_NVFP4 | CHECKPOINT_MXFP4
    )
    weight_block_size: tuple[int, int]
    int4_group_size: int
    # What the checkpoint's quantization_config says beyond the format (checkpoint_quant.py):
    quant_method: str = ""  # fp8 | compressed-tensors | awq | gptq | modelopt | quark; "" for BF16
    quant_group_size: int = 0  # NVFP4's scale group (16); int4 keeps int4_group_size
    int4_zero_points: bool = False  # AWQ zero_point / GPTQ qzeros: a packed 4-bit zero per group
    quantized_families: tuple[str, ...] = ()  # checkpoint_quant.FAMILIES the checkpoint stores quantized
    unquantized_layers: tuple[int, ...] = ()  # decoder layers kept BF16 whole (num_hidden_layers: the MTP layer)
    # A multimodal checkpoint's vision tower and projector, BF16 in every format (vision_tower.py):
    vision_params_tp: int = 0  # the encoder blocks' linear layers, split over TP (mm_encoder_tp_mode "weights")
    vision_params_replicated: int = 0  # patch / position embeddings, norms, biases of row-split layers, projector
    v4: V4Shape | None = None  # DeepSeek-V4's own fields (v4_shape.py); None for V3 / V3.2

    def __hash__(self) -> int:
        # The card keys many planner caches; hashing 30 fields on every lookup would dominate planning time.
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f) for f in self.__dataclass_fields__))
            object.__setattr__(self, "_hash", cached)
        return cached

    @property
    def has_sparse_indexer(self) -> bool:
        """DeepSeek-V3.2's DSA: a per-layer indexer with its own key cache (vLLM: `hasattr(config, "index_topk")`)."""
        return self.index_topk > 0

    @property
    def is_v4(self) -> bool:
        """DeepSeek-V4 (Flash, Pro): compressed / windowed KV, hyper-connections, FP4 experts (v4_shape.py)."""
        return self.v4 is not None

    @property
    def has_vision_tower(self) -> bool:
        """A multimodal checkpoint (Kimi-K2.5): its vision tower and projector load beside the language model."""
        return bool(self.vision_params_tp or self.vision_params_replicated)

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def mla_latent_dim(self) -> int:
        """Values cached per token per layer by MLA: the compressed KV plus the shared rope key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def is_moe_layer(self, layer_index: int) -> bool:
        """vLLM's rule in DeepseekV2DecoderLayer: routed experts from first_k_dense_replace on, every moe_layer_freq."""
        return (
            self.n_routed_experts > 0
            and layer_index >= self.first_k_dense_replace
            and layer_index % self.moe_layer_freq == 0
        )

    @property
    def moe_layer_count(self) -> int:
        return self.moe_layers_between(0, self.num_hidden_layers)

    def moe_layers_between(self, start: int, end: int) -> int:
        """MoE layers among [start, end)."""
        prefix = _moe_prefix(self)
        return prefix[end] - prefix[start]

    @property
    def dense_layer_count(self) -> int:
        return self.num_hidden_layers - self.moe_layer_count


@lru_cache(maxsize=64)
def _moe_prefix(card: ModelCard) -> tuple[int, ...]:
    counts = [0]
    for i in range(card.num_hidden_layers + 1):
        counts.append(counts[-1] + (1 if i < card.num_hidden_layers and card.is_moe_layer(i) else 0))
    return tuple(counts)


def _get(config: Mapping[str, Any], key: str, source: str, *, default: Any = None, required: bool = True) -> Any:
    if key in config and config[key] is not None:
        return config[key]
    if required and default is None:
        raise InputError(f"{source}: {key}", "missing; a DeepSeek-V3 config.json has it")
    return default


def _positive_int(config: Mapping[str, Any], key: str, source: str, *, default: int | None = None) -> int:
    value = _get(config, key, source, default=default)
    return bounded_int(value, f"{source}: {key}", FIELD_LIMITS[key])


def _non_negative_int(config: Mapping[str, Any], key: str, source: str, *, default: int = 0) -> int:
    value = config.get(key, default)
    if value is None:
        value = default
    return bounded_int(value, f"{source}: {key}", FIELD_LIMITS[key], minimum=0, what="a non-negative integer")


@dataclass(frozen=True)
class _Format:
    dtype: str
    method: str
    block: tuple[int, int] = (128, 128)
    int4_group: int = 0
    group: int = 0
    zero_points: bool = False
    families: tuple[str, ...] = ()
    skipped: NameMatcher | None = None  # module prefix -> left unquantized, for the formats that list exclusions
    field: str = ""


def _int_field(quant: Mapping[str, Any], keys: tuple[str, ...], field: str, allowed: tuple[int, ...] = ()) -> int:
    value = next((quant[k] for k in keys if k in quant), None)
    if not isinstance(value, int) or isinstance(value, bool) or not (value in allowed if allowed else value != 0):
        want = f"one of {', '.join(map(str, allowed))}" if allowed else "a positive integer or -1"
        raise InputError(f"{field}.{keys[0]}", f"must be {want}, got {shown(value)}")
    return value


def _int4_group(weights: Mapping[str, Any], field: str) -> int:
    """compressed-tensors' `group_size` of int4 weights (absent or null: 32, the W4A16 recipes' group)."""
    size = weights.get("group_size")
    return 32 if size is None else bounded_int(size, f"{field}.group_size", GROUP_LIMIT)


def _checkpoint_format(config: Mapping[str, Any], source: str) -> _Format:
    quant = config.get("quantization_config")
    field = f"{source}: quantization_config"
    if quant is None:
        return _Format(CHECKPOINT_BF16, "")
    if not isinstance(quant, Mapping):
        raise InputError(field, "must be an object")
    method = quant.get("quant_method")
    if method == "fp8":
        block = quant.get("weight_block_size") or [128, 128]
        if (
            not isinstance(block, list | tuple)
            or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and 0 < b <= GROUP_LIMIT for b in block)
        ):
            raise InputError(
                f"{field}.weight_block_size", f"must be [n, k], each at most {GROUP_LIMIT}, got {shown(block)}"
            )
        return _Format(CHECKPOINT_FP8_BLOCK, "fp8", (int(block[0]), int(block[1])), families=FAMILIES)
    if method == "compressed-tensors":
        groups = quant.get("config_groups") or {}
        for group_name, group in groups.items() if isinstance(groups, Mapping) else ():
            weights = group.get("weights") if isinstance(group, Mapping) else None
            if isinstance(weights, Mapping) and weights.get("num_bits") == 4:
                where = f"{field}.config_groups.{printable(str(group_name), limit=40)}.weights"
                return _Format(
                    CHECKPOINT_INT4,
                    "compressed-tensors",
                    int4_group=_int4_group(weights, where),
                    families=("routed_experts",),
                )
        raise InputError(
            f"{field}.config_groups",
            "only int4 weight-only compressed-tensors checkpoints are understood",
        )
    if method in ("awq", "gptq"):
        _int_field(quant, ("bits", "w_bit"), field, (4,))
        group = _int_field(quant, ("group_size", "q_group_size"), field)
        if group < 0:
            raise InputError(f"{field}.group_size", "-1 (one group per row) is not modelled; allowed: a positive size")
        bounded_int(group, f"{field}.group_size", GROUP_LIMIT)
        if method == "awq":
            zero_point = quant.get("zero_point")
            if not isinstance(zero_point, bool):
                raise InputError(f"{field}.zero_point", f"must be true or false, got {shown(zero_point)}")
            skip: NameMatcher = substrings(
                entry_list(quant.get("modules_to_not_convert"), f"{field}.modules_to_not_convert")
            )
            return _Format(CHECKPOINT_INT4, "awq", int4_group=group, zero_points=zero_point, skipped=skip, field=field)
        dynamic = quant.get("dynamic") or {}
        if not isinstance(dynamic, Mapping):
            raise InputError(f"{field}.dynamic", f"must be an object, got {shown(dynamic)}")
        only = quant.get("modules_in_block_to_quantize") or []
        if not isinstance(only, list):
            raise InputError(f"{field}.modules_in_block_to_quantize", f"must be a list, got {shown(only)}")
        flat = [m for item in only for m in (item if isinstance(item, list) else [item])]
        skip = gptq_matcher(dynamic, entry_list(flat, f"{field}.modules_in_block_to_quantize"), field)
        return _Format(CHECKPOINT_INT4, "gptq", int4_group=group, zero_points=True, skipped=skip, field=field)
    if method in ("modelopt", "modelopt_fp4"):
        algo, group, excluded = modelopt_fields(quant, field)
        if algo != "NVFP4":
            raise InputError(f"{field}.quant_algo", f"{shown(algo)} is not modelled; allowed: 'NVFP4'")
        skip = modelopt_matcher(excluded, f"{field}.exclude_modules")
        return _Format(CHECKPOINT_NVFP4, "modelopt", group=group, skipped=skip, field=field)
    if method == "quark":
        group = quark_mxfp4_group(quant, field)
        skip = quark_matcher(entry_list(quant.get("exclude"), f"{field}.exclude"), f"{field}.exclude")
        return _Format(CHECKPOINT_MXFP4, "quark", group=group, families=FAMILIES, skipped=skip, field=field)
    raise InputError(
        f"{field}.quant_method",
        f"{shown(method)} is not understood; allowed: 'fp8' (block-quantized, as DeepSeek ships), "
        "'compressed-tensors' (int4 experts), 'awq', 'gptq' (int4), 'modelopt' / 'modelopt_fp4' (NVFP4), "
        "'quark' (MXFP4), or no quantization_config (bf16)",
    )


def _with_exclusions(card: ModelCard, fmt: _Format, module_prefix: str = "") -> ModelCard:
    """The card with the families and layers the checkpoint's exclusion list leaves BF16 (checkpoint_quant).

    `module_prefix` is what vLLM puts before `model.layers.<i>` in a multimodal model ("language_model.")."""
    if fmt.skipped is None:
        return card
    last = card.num_hidden_layers
    moe = frozenset(i for i in range(last) if card.is_moe_layer(i)) | ({last} if card.n_routed_experts else set())
    shape = ModelShape(
        num_hidden_layers=last,
        num_nextn_predict_layers=card.num_nextn_predict_layers,
        has_q_lora=card.q_lora_rank is not None,
        has_indexer=card.has_sparse_indexer,
        moe_layers=moe,
        module_prefix=module_prefix,
    )
    found = exclusions(shape, fmt.skipped, fmt.field)
    families = tuple(f for f in FAMILIES if f not in found.unquantized_families)
    return replace(card, quantized_families=families, unquantized_layers=found.unquantized_layers)


def _allowed_architectures() -> str:
    return ", ".join((*SUPPORTED_ARCHITECTURES, *MULTIMODAL_ARCHITECTURES))


def model_card_from_config(config: Mapping[str, Any], source: str, name: str | None = None) -> ModelCard:
    """Build a ModelCard from a parsed config.json. Raises InputError naming `<source>: <field>`."""
    if not isinstance(config, Mapping):
        raise InputError(source, f"config.json must be a JSON object, got {type(config).__name__}")
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or not architectures or not all(isinstance(a, str) for a in architectures):
        raise InputError(f"{source}: architectures", f"must be a list of names; allowed: {_allowed_architectures()}")
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise InputError(f"{source}: model_type", f"must be a name, got {shown(model_type)}")
    wrapper = next((a for a in architectures if a in MULTIMODAL_ARCHITECTURES), None)
    if wrapper is not None:
        return _multimodal_card(config, source, name, wrapper)
    architecture = next((a for a in architectures if a in SUPPORTED_ARCHITECTURES), None)
    if architecture is None:
        raise InputError(
            f"{source}: architectures",
            f"{shown(architectures[0])} is not a DeepSeek-V3 architecture; allowed: {_allowed_architectures()}",
        )
    if architecture == V4_ARCHITECTURE:
        return _v4_card(config, source, name)
    return _text_card(config, source, name, architecture)


def _v4_fields(config: Mapping[str, Any], source: str, num_hidden_layers: int) -> V4Shape:
    ratios = config.get("compress_ratios")
    field = f"{source}: compress_ratios"
    if not isinstance(ratios, list) or len(ratios) < num_hidden_layers:
        raise InputError(field, f"must list one ratio per decoder layer ({num_hidden_layers}), got {shown(ratios)}")
    if len(ratios) > FIELD_LIMITS["compress_ratios"]:
        raise InputError(field, f"at most {FIELD_LIMITS['compress_ratios']:,} entries, got {len(ratios):,}")
    for index, ratio in enumerate(ratios):
        if isinstance(ratio, bool) or ratio not in COMPRESS_RATIOS:
            allowed = ", ".join(map(str, COMPRESS_RATIOS))
            raise InputError(f"{field}[{index}]", f"must be one of {allowed} (vLLM's V4 attention), got {shown(ratio)}")
    expert_dtype = config.get("expert_dtype", "bf16" if config.get("quantization_config") is None else "fp8")
    if expert_dtype not in EXPERT_DTYPES:
        raise InputError(
            f"{source}: expert_dtype", f"must be one of {', '.join(EXPERT_DTYPES)}, got {shown(expert_dtype)}"
        )
    shape = V4Shape(
        head_dim=_positive_int(config, "head_dim", source),
        o_lora_rank=_positive_int(config, "o_lora_rank", source),
        o_groups=_positive_int(config, "o_groups", source),
        sliding_window=_positive_int(config, "sliding_window", source),
        compress_ratios=tuple(int(r) for r in ratios),
        hc_mult=_positive_int(config, "hc_mult", source, default=1),
        num_hash_layers=_non_negative_int(config, "num_hash_layers", source),
        expert_dtype=str(expert_dtype),
        compressed_rope_positions=_compressed_rope_positions(config),
    )
    return shape


def _compressed_rope_positions(config: Mapping[str, Any]) -> int:
    """vLLM common/rope.py build_deepseek_v4_rope: compressed layers keep the config's scaling (deepseek_yarn), whose
    cache (deepseek_scaling_rope.py _compute_cos_sin_cache) has original_max_position_embeddings × factor rows."""
    scaling = config.get("rope_scaling") or config.get("rope_parameters")
    if not isinstance(scaling, Mapping) or (scaling.get("type") or scaling.get("rope_type")) in (None, "default"):
        return 0
    factor, original = scaling.get("factor"), scaling.get("original_max_position_embeddings")
    if isinstance(factor, bool) or isinstance(original, bool):
        return 0
    if not isinstance(factor, int | float) or not isinstance(original, int) or factor <= 0 or original <= 0:
        return 0
    return math.ceil(original * factor)


def _v4_card(config: Mapping[str, Any], source: str, name: str | None) -> ModelCard:
    """DeepSeek-V4: the V3 fields V4 shares, and V4Shape for the rest. MLA's V3 fields are derived the way V4's
    attention uses its one head: the NoPE part (head_dim - qk_rope_head_dim) stands where kv_lora_rank stood, values
    are head_dim wide, every layer is MoE (first_k_dense_replace 0) and the shared expert is moe_intermediate_size wide.
    V4 ships FP8 block-scaled linears (and FP4 experts) or BF16; other formats are refused naming the field."""
    fmt = _checkpoint_format(config, source)
    if fmt.dtype not in (CHECKPOINT_FP8_BLOCK, CHECKPOINT_BF16):
        raise InputError(
            f"{source}: quantization_config.quant_method",
            f"{shown(fmt.method)} is not modelled for DeepSeek-V4; allowed: 'fp8' (as DeepSeek ships it) or none (bf16)",
        )
    layers = _positive_int(config, "num_hidden_layers", source)
    v4 = _v4_fields(config, source, layers)
    rope = _positive_int(config, "qk_rope_head_dim", source)
    if rope >= v4.head_dim:
        raise InputError(f"{source}: qk_rope_head_dim", f"{rope} must be smaller than head_dim {v4.head_dim}")
    heads = _positive_int(config, "num_attention_heads", source)
    if heads % v4.o_groups:
        raise InputError(f"{source}: o_groups", f"{v4.o_groups} must divide num_attention_heads {heads}")
    q_lora = _positive_int(config, "q_lora_rank", source)
    index_topk = _non_negative_int(config, "index_topk", source)
    moe_inter = _positive_int(config, "moe_intermediate_size", source)
    card = ModelCard(
        name=name or str(config.get("model_type") or V4_ARCHITECTURE),
        source=source,
        architecture=V4_ARCHITECTURE,
        model_type=str(config.get("model_type") or ""),
        hidden_size=_positive_int(config, "hidden_size", source),
        num_hidden_layers=layers,
        first_k_dense_replace=0,
        moe_layer_freq=1,
        intermediate_size=moe_inter,
        moe_intermediate_size=moe_inter,
        n_routed_experts=_positive_int(config, "n_routed_experts", source),
        n_shared_experts=_non_negative_int(config, "n_shared_experts", source),
        num_experts_per_tok=_positive_int(config, "num_experts_per_tok", source),
        n_group=1,
        topk_group=1,
        num_attention_heads=heads,
        q_lora_rank=q_lora,
        kv_lora_rank=v4.head_dim - rope,
        qk_nope_head_dim=v4.head_dim - rope,
        qk_rope_head_dim=rope,
        v_head_dim=v4.head_dim,
        vocab_size=_positive_int(config, "vocab_size", source),
        max_position_embeddings=_positive_int(config, "max_position_embeddings", source),
        num_nextn_predict_layers=_non_negative_int(config, "num_nextn_predict_layers", source),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        index_n_heads=_non_negative_int(config, "index_n_heads", source) if index_topk else 0,
        index_head_dim=_non_negative_int(config, "index_head_dim", source) if index_topk else 0,
        index_topk=index_topk,
        checkpoint_dtype=fmt.dtype,
        weight_block_size=fmt.block,
        int4_group_size=0,
        quant_method=fmt.method,
        quantized_families=fmt.families,
        v4=v4,
    )
    if card.num_experts_per_tok > card.n_routed_experts:
        raise InputError(
            f"{source}: num_experts_per_tok",
            f"{card.num_experts_per_tok} exceeds n_routed_experts {card.n_routed_experts}",
        )
    if v4.num_hash_layers > layers:
        raise InputError(f"{source}: num_hash_layers", f"{v4.num_hash_layers} exceeds num_hidden_layers {layers}")
    if 4 in v4.compress_ratios[:layers] and (card.index_n_heads <= 0 or card.index_head_dim <= 0):
        raise InputError(
            f"{source}: index_n_heads",
            "C4A layers (compress ratio 4) need the indexer: index_topk, index_n_heads, index_head_dim",
        )
    return card


def _multimodal_card(config: Mapping[str, Any], source: str, name: str | None, wrapper: str) -> ModelCard:
    """Kimi-K2.5: a DeepSeek-V3 language model under `text_config` plus a MoonViT vision tower.

    vLLM (transformers_utils/configs/kimi_k25.py) reads the quantization_config at the top level, where
    KimiK25Config copies the text model's; the exclusion lists name `language_model.model.layers.<i>…`."""
    text = config.get("text_config")
    if not isinstance(text, Mapping):
        raise InputError(f"{source}: text_config", f"{wrapper} needs the DeepSeek-V3 text_config object")
    text_config = dict(text)
    quant = config.get("quantization_config", text.get("quantization_config"))
    text_config["quantization_config"] = quant
    card = _text_card(
        text_config,
        source,
        name or str(config.get("model_type") or wrapper),
        "DeepseekV3ForCausalLM",
        module_prefix=MULTIMODAL_ARCHITECTURES[wrapper],
    )
    tower = vision_tower_params(config.get("vision_config"), card.hidden_size, f"{source}: vision_config")
    return replace(
        card,
        architecture=wrapper,
        model_type=str(config.get("model_type") or card.model_type),
        vision_params_tp=tower.split_over_tp,
        vision_params_replicated=tower.replicated,
    )


def _text_card(
    config: Mapping[str, Any], source: str, name: str | None, architecture: str, module_prefix: str = ""
) -> ModelCard:
    fmt = _checkpoint_format(config, source)
    q_lora = config.get("q_lora_rank")
    if q_lora is not None:
        bounded_int(q_lora, f"{source}: q_lora_rank", FIELD_LIMITS["q_lora_rank"], what="a positive integer (or null)")
    index_topk = _non_negative_int(config, "index_topk", source)
    card = ModelCard(
        name=name or str(config.get("model_type") or architecture),
        source=source,
        architecture=architecture,
        model_type=str(config.get("model_type") or ""),
        hidden_size=_positive_int(config, "hidden_size", source),
        num_hidden_layers=_positive_int(config, "num_hidden_layers", source),
        first_k_dense_replace=_non_negative_int(config, "first_k_dense_replace", source),
        moe_layer_freq=_positive_int(config, "moe_layer_freq", source, default=1),
        intermediate_size=_positive_int(config, "intermediate_size", source),
        moe_intermediate_size=_positive_int(config, "moe_intermediate_size", source),
        n_routed_experts=_positive_int(config, "n_routed_experts", source),
        n_shared_experts=_non_negative_int(config, "n_shared_experts", source),
        num_experts_per_tok=_positive_int(config, "num_experts_per_tok", source),
        n_group=_positive_int(config, "n_group", source, default=1),
        topk_group=_positive_int(config, "topk_group", source, default=1),
        num_attention_heads=_positive_int(config, "num_attention_heads", source),
        q_lora_rank=q_lora,
        kv_lora_rank=_positive_int(config, "kv_lora_rank", source),
        qk_nope_head_dim=_positive_int(config, "qk_nope_head_dim", source),
        qk_rope_head_dim=_positive_int(config, "qk_rope_head_dim", source),
        v_head_dim=_positive_int(config, "v_head_dim", source),
        vocab_size=_positive_int(config, "vocab_size", source),
        max_position_embeddings=_positive_int(config, "max_position_embeddings", source),
        num_nextn_predict_layers=_non_negative_int(config, "num_nextn_predict_layers", source),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        index_n_heads=_non_negative_int(config, "index_n_heads", source) if index_topk else 0,
        index_head_dim=_non_negative_int(config, "index_head_dim", source) if index_topk else 0,
        index_topk=index_topk,
        checkpoint_dtype=fmt.dtype,
        weight_block_size=fmt.block,
        int4_group_size=fmt.int4_group,
        quant_method=fmt.method,
        quant_group_size=fmt.group,
        int4_zero_points=fmt.zero_points,
        quantized_families=fmt.families,
    )
    if card.num_experts_per_tok > card.n_routed_experts:
        raise InputError(
            f"{source}: num_experts_per_tok",
            f"{card.num_experts_per_tok} exceeds n_routed_experts {card.n_routed_experts}",
        )
    if card.first_k_dense_replace > card.num_hidden_layers:
        raise InputError(f"{source}: first_k_dense_replace", "exceeds num_hidden_layers")
    if card.has_sparse_indexer and (card.index_n_heads <= 0 or card.index_head_dim <= 0 or q_lora is None):
        raise InputError(
            f"{source}: index_n_heads", "a config with index_topk needs index_n_heads, index_head_dim and q_lora_rank"
        )
    return _with_exclusions(card, fmt, module_prefix)
