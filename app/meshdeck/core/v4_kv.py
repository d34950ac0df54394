"""DeepSeek-V4's KV cache exactly as each modelled vLLM release sizes it: groups, blocks, tokens and concurrency.

A V4 layer caches up to five things, each its own vLLM "layer" with its own KVCacheSpec:

- every layer (and the MTP layer) keeps the last `sliding_window` tokens uncompressed: `DeepseekV4SWACache`
  (vllm/v1/attention/backends/mla/sparse_swa.py), a SlidingWindowMLASpec of 64-token blocks;
- C4 and C128 layers keep one compressed latent per 4 / 128 tokens: `DeepseekV4Attention.get_kv_cache_spec`
  (vllm/models/deepseek_v4/attention.py), an MLAAttentionSpec of 256-token blocks, `tokens_per_state` = ratio;
- C4 layers' lightning indexer keeps one key per 4 tokens: `DeepseekV4IndexerCache.get_kv_cache_spec` (same file);
- each compressor (the attention's, and on C4 layers the indexer's) keeps fp32 running states over its window:
  `CompressorStateCache.get_kv_cache_spec` (vllm/models/deepseek_v4/compressor.py), a SlidingWindowMLASpec of
  4-token (C4) or 8-token (C128) blocks.

vLLM then packs these mixed page sizes into one block pool (vllm/v1/core/kv_cache_utils.py:
`get_kv_cache_groups` → `_get_packed_kv_cache_groups`, because V4's indexer backend only supports block-outermost
layouts), sizes a block as the widest group's pages (`_get_kv_cache_bytes_per_block`), and counts a request at
max_model_len as the sum over groups of the pages it needs (`get_max_concurrency_for_kv_cache_config`). The
sliding-window kinds (SWA and compressor states) are sized by the tokens in flight, not by max_model_len
(`SlidingWindowSpec.max_admission_blocks_per_request`), which is why the fp32 compressor states can dominate.

That is 0.29 onwards. Older releases size the same specs otherwise (`V4_KV_RULES`: which tokens in flight size the
sliding-window kinds, and how the groups are formed, a block sized and a request counted); releases that serve V4
but were not read (0.20-0.22) are refused rather than given another release's rules.

This module reimplements those rules on plain numbers (no vLLM import, no I/O). Checked against vLLM 0.32.0's own
code by tests/integration/vllm/test_v4_kv_matches_vllm.py: the CPU model built by vLLM, and the CUDA backends'
spec objects handed to vLLM's grouping code for full-size V4-Flash and V4-Pro. The older rules were checked the same
way, by running each release wheel's own kv_cache_utils on V4-Flash's CUDA FlashMLA specs (0.23.0, 0.24.0, 0.26.0,
0.27.0, 0.28.0, 0.29.0, 0.31.0: tests/unit/core/test_v4_kv.py holds those numbers).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from meshdeck.core.errors import InputError
from meshdeck.core.model_card import ModelCard
from meshdeck.core.vllm_releases import Release, ReleaseRange, release_text

V4_BLOCK_SIZE = 256  # cache_config.block_size: the sparse-MLA and V4 indexer backends accept only 256 (platforms/cpu.py
# forces it; DeepseekV4SparseMLABackend / DeepseekV4IndexerBackend.get_supported_kernel_block_sizes == [256])
SWA_BLOCK_SIZE = 64  # DeepseekV4SWACache(block_size=64)
FP8_DS_MLA_TOKEN_BYTES = 584  # 448 B fp8 NoPE + 128 B bf16 RoPE + 8 B UE8M0 scales (attention.py, sparse_swa.py)
FP8_DS_MLA_ALIGNMENT = 576  # FlashMLA packing stride: fp8_ds_mla pages round up to a multiple of 576 B
PLAIN_ALIGNMENT = 512  # every other V4 page rounds up to a multiple of 512 B
INDEXER_QUANT_BLOCK = 128  # DeepseekV4Indexer.quant_block_size: one fp32 scale per 128 fp8 values
MXFP4_BLOCK = 32  # MXFP4_BLOCK_SIZE: one UE8M0 byte per 32 fp4 values
MAX_KV_BYTES = 1 << 50  # 1 PiB per worker: larger is a typo
MAX_TOKENS = 1 << 40  # bounds max_model_len / max_num_batched_tokens so the arithmetic stays small

KIND_SWA = "swa"
KIND_C4 = "c4_latent"
KIND_C128 = "c128_latent"
KIND_INDEXER = "indexer"
KIND_STATE = "compressor_state"
KINDS = (KIND_SWA, KIND_C4, KIND_C128, KIND_INDEXER, KIND_STATE)

KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla")
INDEXER_KV_DTYPES = ("fp8", "mxfp4")


class V4Backend(enum.Enum):
    """Which V4 attention class vLLM 0.32 builds; it decides the KV layout.

    `_select_dsv4_attn_cls` (vllm/models/deepseek_v4/nvidia/model.py) picks FlashMLA on every CUDA arch but SM12x
    unless `--attention-backend FLASHINFER_MLA_SPARSE_DSV4` asks for FlashInfer; SM12x defaults to FlashInfer's
    SM120 class. All of them but CUDA_FLASHINFER (`use_fp8_ds_mla_layout = False`) store the fp8_ds_mla layout.
    """

    CPU = "cpu"  # DeepseekV4CPUAttention (models/deepseek_v4/cpu/cpu_sparse.py)
    CUDA_FLASHMLA = "cuda-flashmla"  # DeepseekV4FlashMLAAttention: Hopper SM90, Blackwell SM100 by default
    CUDA_FLASHINFER_SM120 = "cuda-flashinfer-sm120"  # DeepseekV4FlashInferSM120Attention: SM12x
    CUDA_FLASHINFER = "cuda-flashinfer"  # DeepseekV4FlashInferMLAAttention: plain bf16 / fp8 rows
    ROCM = "rocm"  # DeepseekV4ROCMAiterMLAAttention (models/deepseek_v4/amd/rocm.py)

    @property
    def uses_fp8_ds_mla_layout(self) -> bool:
        """`DeepseekV4Attention.use_fp8_ds_mla_layout` of the class this backend builds."""
        return self is not V4Backend.CUDA_FLASHINFER


class InFlight(enum.Enum):
    """Which tokens in flight size a request's sliding-window pages (`SlidingWindowSpec.max_admission_blocks_per_request`
    as `SlidingWindowSpec.max_memory_usage_bytes` calls it)."""

    ONE_BATCH = "one batch"  # scheduler_config.max_num_batched_tokens
    CONCURRENT_BATCHES = "concurrent batches"  # VllmConfig.max_in_flight_tokens = max_concurrent_batches × batch


class Grouping(enum.Enum):
    """How the V4 caches become KV cache groups, how wide a block is and how many blocks a request counts."""

    # kv_cache_utils.py group_and_unify_kv_cache_specs + _get_kv_cache_groups_uniform_groups: all full-attention
    # layers in one group, each sliding-window (block, window) bucket split into groups of `num_layer_tuples`
    # layer tuples, its pages padded up to the nearest full-attention page; a block is the sum over page sizes of
    # page × most layers of that size in one group (_bucket_layers_by_page_size); a request counts
    # cdiv(Σ_g pages_g × page_g, page_0) blocks (get_max_concurrency_for_kv_cache_config, weighted by page size).
    LAYER_TUPLES_PADDED = "layer tuples, padded pages"
    # The same groups without the padding; groups overlay one block as wide as the widest group
    # (_get_packed_kv_cache_layout) and a request counts Σ_g pages_g blocks.
    LAYER_TUPLES = "layer tuples"
    # _get_packed_kv_cache_groups (see _packed_groups), widest group's block, Σ_g pages_g.
    PACKED = "packed"


class ModelRunner(enum.Enum):
    """Which model runner V4 gets by default (`VllmConfig.use_v2_model_runner`); it sets max_concurrent_batches."""

    V1 = "v1"
    V2 = "v2"
    V2_EXCEPT_ROCM = "v2 (v1 on ROCm)"


@dataclass(frozen=True)
class V4KvRules(ReleaseRange):
    """One range of releases that size V4's KV cache the same way, and where each rule was read."""

    in_flight: InFlight
    grouping: Grouping
    retains_lookahead: bool  # multi-module MTP keeps num_speculative_tokens - 1 more window tokens
    runner: ModelRunner
    null_block_in_check: bool  # _check_enough_kv_cache_memory is handed the budget less one block
    source: str

    def max_concurrent_batches(self, pipeline_parallel: int, rocm: bool = False) -> int:
        """`VllmConfig.max_concurrent_batches` with async scheduling on (its default with the multiprocessing
        executor and no speculative method that turns it off, config/vllm.py __post_init__ in every range): PP + 1
        on Model Runner V2; on V1 2 at PP 1 and PP otherwise (V1 does not overlap PP with async scheduling)."""
        v2 = self.runner is ModelRunner.V2 or (self.runner is ModelRunner.V2_EXCEPT_ROCM and not rocm)
        if v2:
            return pipeline_parallel + 1
        return 2 if pipeline_parallel <= 1 else pipeline_parallel

    def in_flight_tokens(self, max_num_batched_tokens: int, concurrent_batches: int) -> int:
        """The tokens in flight a request's sliding-window pages are sized for."""
        if self.in_flight is InFlight.ONE_BATCH:
            return max_num_batched_tokens
        return concurrent_batches * max_num_batched_tokens


_TUPLES_023 = (
    "v1/core/kv_cache_utils.py group_and_unify_kv_cache_specs 1431, _get_kv_cache_groups_uniform_groups 1504 (pages "
    "padded to the nearest full-attention page, page_size_padded), _bucket_layers_by_page_size 1196 / "
    "_get_kv_cache_config_deepseek_v4 1221 (block = Σ page × slots), get_max_concurrency_for_kv_cache_config 899 "
    "(cdiv(layers × Σ group bytes, layers × group 0's page)), _max_memory_usage_bytes_from_groups 1752 (the start "
    "check: layer tuples × pages × Σ distinct full-attention pages, no null block)"
)
V4_KV_RULES: tuple[V4KvRules, ...] = (
    V4KvRules(
        (0, 23),
        (0, 25),
        in_flight=InFlight.ONE_BATCH,
        grouping=Grouping.LAYER_TUPLES_PADDED,
        retains_lookahead=False,
        runner=ModelRunner.V1,
        null_block_in_check=False,
        source="0.23.0: v1/kv_cache_interface.py SlidingWindowSpec.max_memory_usage_bytes 510 → "
        "max_admission_blocks_per_request(scheduler_config.max_num_batched_tokens) 488 (config/vllm.py has no "
        "max_in_flight_tokens); "
        + _TUPLES_023
        + "; 0.24.0 and 0.25.0 the same functions (0.24.0 _pool_bytes_per_block / _get_kv_cache_config_packed keep "
        "the bucket slots; kv_cache_interface.py 0.24.0 535, 0.25.0 575 pass max_num_batched_tokens); DeepseekV4 "
        "not in DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES (V1)",
    ),
    V4KvRules(
        (0, 26),
        (0, 26),
        in_flight=InFlight.CONCURRENT_BATCHES,
        grouping=Grouping.LAYER_TUPLES_PADDED,
        retains_lookahead=False,
        runner=ModelRunner.V1,
        null_block_in_check=False,
        source="0.26.0: config/vllm.py max_in_flight_tokens 525 (max_concurrent_batches × max_num_batched_tokens), "
        "kv_cache_interface.py SlidingWindowSpec.max_memory_usage_bytes 595; kv_cache_utils.py grouping, block and "
        "concurrency as 0.23–0.25; use_v2_model_runner: DeepseekV4 is 'not otherwise a default-V2 architecture' (V1)",
    ),
    V4KvRules(
        (0, 27),
        (0, 27),
        in_flight=InFlight.CONCURRENT_BATCHES,
        grouping=Grouping.LAYER_TUPLES,
        retains_lookahead=False,
        runner=ModelRunner.V1,
        null_block_in_check=False,
        source="0.27.0: kv_cache_utils.py _get_kv_cache_groups_uniform_groups 1670 ('The packed block planner "
        "overlays groups, so their page sizes do not need to match': no padding), _get_packed_kv_cache_layout "
        "(block = widest group), get_max_concurrency_for_kv_cache_config 937 (Σ_g cdiv(group bytes, group page)), "
        "_max_memory_usage_bytes_from_groups as 0.23; V1 runner as 0.26",
    ),
    V4KvRules(
        (0, 28),
        (0, 28),
        in_flight=InFlight.CONCURRENT_BATCHES,
        grouping=Grouping.LAYER_TUPLES,
        retains_lookahead=True,
        runner=ModelRunner.V2_EXCEPT_ROCM,
        null_block_in_check=False,
        source="0.28.0: as 0.27, plus get_kv_cache_configs 2137 (extra_retained_tokens = num_speculative_tokens - 1 "
        "with multi-module MTP) and config/vllm.py DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES with DeepseekV4ForCausalLM "
        "(removed on ROCm, default_v2_model_runner_architectures)",
    ),
    V4KvRules(
        (0, 29),
        (0, 31),
        in_flight=InFlight.CONCURRENT_BATCHES,
        grouping=Grouping.PACKED,
        retains_lookahead=True,
        runner=ModelRunner.V2_EXCEPT_ROCM,
        null_block_in_check=True,
        source="0.29.0 and 0.31.0: kv_cache_utils.py _get_packed_kv_cache_groups (0.29.0 1668, 0.31.0 2001), "
        "get_kv_cache_configs reserves the null block before _check_enough_kv_cache_memory (0.29.0 975, 0.31.0 "
        "1018); their own code on V4-Flash's specs gives 0.32.0's groups, blocks and tokens; use_v2_model_runner "
        "defaults to V2 but ROCM_DEFAULT_MRV1_ARCHITECTURES holds DeepseekV4ForCausalLM (0.29.0 71, 0.31.0 75). "
        "0.30.0 was not read: it lies between two releases that agree",
    ),
    V4KvRules(
        (0, 32),
        (0, 33),
        in_flight=InFlight.CONCURRENT_BATCHES,
        grouping=Grouping.PACKED,
        retains_lookahead=True,
        runner=ModelRunner.V2,
        null_block_in_check=True,
        source="0.32.0 (the installed build; tests/integration/vllm/test_v4_kv_matches_vllm.py): kv_cache_utils.py "
        "_get_packed_kv_cache_groups 1860, get_max_concurrency_for_kv_cache_config 1195, config/vllm.py "
        "max_in_flight_tokens 590, use_v2_model_runner (no ROCm exception). 0.33.0: config/vllm.py "
        "max_concurrent_batches / max_in_flight_tokens unchanged and kv_cache_utils.py "
        "get_max_concurrency_for_kv_cache_config the same as 0.32.0; its grouping moved to "
        "v1/core/kv_cache_planning.py (_get_packed_kv_cache_groups 914) and was not run on V4's specs",
    ),
)

CPU_RELEASE: Release = (0, 32)  # the installed CPU build `meshdeck plan --cpu` plans for


def v4_kv_modelled_ranges() -> str:
    return ", ".join(rules.label for rules in V4_KV_RULES)


def v4_kv_rules(version: Release) -> V4KvRules:
    """The V4 KV rules of this release, or an InputError naming `--vllm-version` and the modelled ranges."""
    for rules in V4_KV_RULES:
        if rules.holds(version):
            return rules
    raise InputError(
        "--vllm-version",
        f"{release_text(version)}: how this release sizes DeepSeek-V4's KV cache has not been read (its grouping "
        f"and in-flight rules changed between releases); the planner models V4's KV cache for vLLM "
        f"{v4_kv_modelled_ranges()}",
    )


def cuda_backend(capability_major: int, attention_backend: str | None = None) -> V4Backend:
    """`_select_dsv4_attn_cls` (vllm/models/deepseek_v4/nvidia/model.py) for a CUDA GPU of compute capability
    `capability_major`.x and the `--attention-backend` given (None: not given)."""
    if attention_backend in ("FLASHINFER_MLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM120"):
        raise InputError(
            "vllm.attention_backend",
            f"{attention_backend} is not a DeepSeek V4 backend; use FLASHINFER_MLA_SPARSE_DSV4",
        )
    if attention_backend == "FLASHINFER_MLA_SPARSE_DSV4":
        return V4Backend.CUDA_FLASHINFER_SM120 if capability_major == 12 else V4Backend.CUDA_FLASHINFER
    if attention_backend in ("FLASHMLA_SPARSE", "FLASHMLA_SPARSE_DSV4"):
        return V4Backend.CUDA_FLASHMLA
    return V4Backend.CUDA_FLASHINFER_SM120 if capability_major == 12 else V4Backend.CUDA_FLASHMLA


@dataclass(frozen=True)
class V4LayerSpec:
    """One kind of cache layer as vLLM specs it (the fields of its MLAAttentionSpec / SlidingWindowMLASpec)."""

    kind: str  # one of KINDS
    block_size: int  # tokens per block
    tokens_per_state: int  # tokens one stored row covers (the compress ratio; 1 for SWA and compressor states)
    real_page_size_bytes: int  # rows per block × bytes per row
    page_size_bytes: int  # real_page_size_bytes rounded up to the alignment (`_apply_alignment_padding`)
    sliding_window: int | None  # sliding-window kinds only: the window in tokens
    pages_per_request: int  # pages a request at max_model_len holds (`max_memory_usage_bytes` / page size)

    @property
    def bucket(self) -> tuple[int, int | None]:
        """`UniformTypeKVCacheSpecs.is_uniform_type`: same block size, and full attention or the same window."""
        return (self.block_size, self.sliding_window)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "block_size": self.block_size,
            "tokens_per_state": self.tokens_per_state,
            "real_page_size_bytes": self.real_page_size_bytes,
            "page_size_bytes": self.page_size_bytes,
            "sliding_window": self.sliding_window,
            "pages_per_request": self.pages_per_request,
        }


@dataclass(frozen=True)
class V4KvGroup:
    """One KV cache group vLLM forms, as this worker holds it (`_project_kv_cache_groups_to_worker`)."""

    members: tuple[tuple[V4LayerSpec, int], ...]  # (spec, layers of it on this worker), in vLLM's order
    global_layers: int  # the group's layers in the whole engine (all PP stages)
    pages_per_request: int  # block ids a request at max_model_len takes from the pool for this group

    @property
    def layers(self) -> int:
        return sum(count for _, count in self.members)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(spec.kind for spec, _ in self.members))

    @property
    def block_size(self) -> int:
        return self.members[0][0].block_size

    @property
    def page_size_bytes(self) -> int:
        """`UniformTypeKVCacheSpecs.page_size_bytes` on this worker: the sum of its layers' padded pages."""
        return sum(spec.page_size_bytes * count for spec, count in self.members)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kinds": list(self.kinds),
            "layers": self.layers,
            "global_layers": self.global_layers,
            "block_size": self.block_size,
            "page_size_bytes": self.page_size_bytes,
            "pages_per_request": self.pages_per_request,
            "members": [{**spec.as_dict(), "layers": count} for spec, count in self.members],
        }


@dataclass(frozen=True)
class V4KvPlan:
    """One worker's V4 KV pool as vLLM 0.32 sizes it.

    `tokens` is what vLLM logs as "KV cache size: N tokens": int(max_concurrency × max_model_len), with
    max_concurrency = num_blocks / blocks_per_request (`get_kv_cache_capacity`). Every TP rank holds the whole
    cache of its layers (all V4 specs set max_tp_shards=1), so the numbers are per GPU (or CPU worker) whatever TP.

    `kv_bytes_per_token_per_gpu` is the budget a token of that capacity actually uses: bytes_per_block ×
    blocks_per_request / max_model_len, so that tokens == int(num_blocks × bytes_per_block /
    kv_bytes_per_token_per_gpu) up to float rounding — the rounding vLLM itself does is reproduced exactly in
    `tokens`. It is amortised at max_model_len: the sliding-window kinds hold a fixed number of pages per
    request, so a shorter max_model_len costs more per token. `bytes_per_token` splits it by kind; "padding" is
    the part of each block a group leaves unused because blocks are as wide as the widest group.
    """

    release: Release  # the vLLM release whose rules sized it (v4_kv_rules)
    required_bytes: int  # the least budget vLLM starts with: one request at max_model_len (and the null block)
    backend: V4Backend
    kv_cache_dtype: str  # as vLLM resolves it (fp8_ds_mla on the fp8_ds_mla layout)
    kv_budget_bytes: int
    max_model_len: int
    max_in_flight_tokens: int
    groups: tuple[V4KvGroup, ...]
    bytes_per_block: int
    blocks_per_request: int
    num_blocks: int
    tokens: int
    max_concurrency: float
    bytes_per_token: tuple[tuple[str, float], ...]  # (kind or "padding", bytes per token of capacity)

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        return self.bytes_per_block * self.blocks_per_request / self.max_model_len

    @property
    def used_bytes(self) -> int:
        """Bytes vLLM allocates: num_blocks × bytes_per_block (the rest of the budget stays unused)."""
        return self.num_blocks * self.bytes_per_block

    def breakdown(self) -> dict[str, float]:
        return dict(self.bytes_per_token)

    def as_dict(self) -> dict[str, Any]:
        return {
            "vllm_version": release_text(self.release),
            "required_bytes": self.required_bytes,
            "backend": self.backend.value,
            "kv_cache_dtype": self.kv_cache_dtype,
            "kv_budget_bytes": self.kv_budget_bytes,
            "max_model_len": self.max_model_len,
            "max_in_flight_tokens": self.max_in_flight_tokens,
            "groups": [group.as_dict() for group in self.groups],
            "bytes_per_block": self.bytes_per_block,
            "blocks_per_request": self.blocks_per_request,
            "num_blocks": self.num_blocks,
            "tokens": self.tokens,
            "max_concurrency": self.max_concurrency,
            "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token_per_gpu,
            "bytes_per_token": self.breakdown(),
        }


def resolve_kv_cache_dtype(backend: V4Backend, kv_cache_dtype: str) -> str:
    """`_resolve_dsv4_kv_cache_dtype` (attention.py): on the fp8_ds_mla layout `auto` and every fp8 name become
    fp8_ds_mla and bf16 is refused; plain rows keep the name (auto / bfloat16: bf16 rows, fp8*: fp8 e4m3 rows)."""
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise InputError("vllm.kv_cache_dtype", f"{kv_cache_dtype!r}; DeepSeek-V4 takes {', '.join(KV_CACHE_DTYPES)}")
    if backend.uses_fp8_ds_mla_layout:
        if not (kv_cache_dtype == "auto" or kv_cache_dtype.startswith("fp8")):
            raise InputError(
                "vllm.kv_cache_dtype",
                f"{kv_cache_dtype!r}: the {backend.value} backend stores fp8_ds_mla only (vLLM: 'DeepseekV4 "
                "fp8_ds_mla layout only supports fp8 kv-cache'); use auto or fp8",
            )
        return "fp8_ds_mla"
    if kv_cache_dtype == "fp8_ds_mla":
        raise InputError(
            "vllm.kv_cache_dtype",
            "fp8_ds_mla is FlashMLA's layout; FLASHINFER_MLA_SPARSE_DSV4 takes auto, bfloat16, fp8",
        )
    return kv_cache_dtype


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(value: int, multiple: int) -> int:
    return _cdiv(value, multiple) * multiple


def _positive(field: str, value: int, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise InputError(field, f"{value!r}: a whole number from 1 to {limit:,}")
    return value


def cache_specs(
    card: ModelCard,
    *,
    backend: V4Backend,
    kv_cache_dtype: str,
    max_model_len: int,
    max_in_flight_tokens: int,
    extra_retained_tokens: int = 0,
    indexer_kv_dtype: str = "fp8",
) -> dict[str, V4LayerSpec]:
    """The spec of each cache kind of `card`, keyed by kind, the compressor states as `compressor_state:c4`
    (the attention's), `compressor_state:c4_indexer` and `compressor_state:c128`. `kv_cache_dtype` is vLLM's
    resolved name (`resolve_kv_cache_dtype`); `max_in_flight_tokens` and `extra_retained_tokens` size the
    sliding-window kinds (see `plan_v4_kv`)."""
    if card.v4 is None:
        raise InputError("model", f"{card.name} is not a DeepSeek-V4 model (no compress_ratios)")
    if indexer_kv_dtype not in INDEXER_KV_DTYPES:
        raise InputError(
            "vllm.attention_config.indexer_kv_dtype", f"{indexer_kv_dtype!r}; allowed: {', '.join(INDEXER_KV_DTYPES)}"
        )
    head_dim = card.v4.head_dim
    window = card.v4.sliding_window
    ds_mla = kv_cache_dtype == "fp8_ds_mla"
    alignment = FP8_DS_MLA_ALIGNMENT if ds_mla else PLAIN_ALIGNMENT
    # Plain rows: MLA specs have head_size_v 0, so a row is head_dim values of the element dtype.
    row_bytes = FP8_DS_MLA_TOKEN_BYTES if ds_mla else head_dim * (1 if kv_cache_dtype.startswith("fp8") else 2)

    def full(kind: str, ratio: int, row: int) -> V4LayerSpec:
        # MLAAttentionSpec: block_size // tokens_per_state rows; FullAttentionSpec.max_memory_usage_bytes
        # = cdiv(max_model_len, block_size) pages.
        real = (V4_BLOCK_SIZE // ratio) * row
        return V4LayerSpec(
            kind=kind,
            block_size=V4_BLOCK_SIZE,
            tokens_per_state=ratio,
            real_page_size_bytes=real,
            page_size_bytes=_round_up(real, alignment),
            sliding_window=None,
            pages_per_request=_cdiv(max_model_len, V4_BLOCK_SIZE),
        )

    def sliding(kind: str, block: int, row: int, win: int) -> V4LayerSpec:
        # SlidingWindowSpec.max_admission_blocks_per_request: the window's tokens plus those in flight, at most
        # max_model_len, plus one block for a window that does not start on a block boundary.
        tokens = min(win - 1 + extra_retained_tokens + max_in_flight_tokens, max_model_len)
        real = block * row
        return V4LayerSpec(
            kind=kind,
            block_size=block,
            tokens_per_state=1,
            real_page_size_bytes=real,
            page_size_bytes=_round_up(real, alignment),
            sliding_window=win,
            pages_per_request=_cdiv(tokens, block) + 1,
        )

    # DeepseekV4Indexer: fp8 keys + one fp32 scale per 128 values, or MXFP4 (two values a byte + a scale per 32).
    index_dim = card.index_head_dim
    if indexer_kv_dtype == "mxfp4":
        index_row = index_dim // 2 + index_dim // MXFP4_BLOCK
    else:
        index_row = index_dim + index_dim // INDEXER_QUANT_BLOCK * 4
    # CompressorStateCache: fp32 kv_state + score_state, 2 × coff × head_dim wide (coff 2 for the overlapping C4).
    return {
        KIND_SWA: sliding(KIND_SWA, SWA_BLOCK_SIZE, row_bytes, window),
        KIND_C4: full(KIND_C4, 4, row_bytes),
        KIND_C128: full(KIND_C128, 128, row_bytes),
        KIND_INDEXER: full(KIND_INDEXER, 4, index_row),
        f"{KIND_STATE}:c4_indexer": sliding(KIND_STATE, 4, 2 * 2 * index_dim * 4, 2 * 4),
        f"{KIND_STATE}:c4": sliding(KIND_STATE, 4, 2 * 2 * head_dim * 4, 2 * 4),
        f"{KIND_STATE}:c128": sliding(KIND_STATE, 8, 2 * 1 * head_dim * 4, 128),
    }


def _engine_layers(card: ModelCard, specs: dict[str, V4LayerSpec], mtp_layers: int) -> list[tuple[int, V4LayerSpec]]:
    """(layer index, spec) of every cache layer of the engine, in the order vLLM registers them in the static
    forward context (a C4 layer: indexer keys, indexer compressor state, SWA, latent, compressor state; the MTP
    layers, ratio 1, come last)."""
    assert card.v4 is not None
    out: list[tuple[int, V4LayerSpec]] = []
    for index in range(card.num_hidden_layers + mtp_layers):
        ratio = card.v4.compress_ratio(index, card.num_hidden_layers)
        if ratio == 4:
            out += [
                (index, specs[KIND_INDEXER]),
                (index, specs[f"{KIND_STATE}:c4_indexer"]),
                (index, specs[KIND_SWA]),
                (index, specs[KIND_C4]),
                (index, specs[f"{KIND_STATE}:c4"]),
            ]
        elif ratio == 128:
            out += [(index, specs[KIND_SWA]), (index, specs[KIND_C128]), (index, specs[f"{KIND_STATE}:c128"])]
        else:
            out.append((index, specs[KIND_SWA]))
    return out


def _approximate_gcd(values: Sequence[int], lower_bound: int) -> int:
    """kv_cache_utils.py `_approximate_gcd`: the chunk size in [lower_bound, max(values)] with the least total
    round-up padding, ties to the larger."""
    best_d = max(1, lower_bound)
    if best_d > max(values):
        return best_d
    best_pad: int | None = None
    for d in range(best_d, max(values) + 1):
        pad = sum((d - (x % d)) % d for x in values)
        if best_pad is None or pad < best_pad or (pad == best_pad and d > best_d):
            best_pad, best_d = pad, d
    return best_d


def _packed_groups(layers: list[tuple[int, V4LayerSpec]]) -> list[list[tuple[int, V4LayerSpec]]]:
    """kv_cache_utils.py `_get_packed_kv_cache_groups` (V4 has no Mamba or circular-buffer specs)."""
    buckets: dict[tuple[int, int | None], list[tuple[int, V4LayerSpec]]] = {}
    for layer in layers:
        buckets.setdefault(layer[1].bucket, []).append(layer)
    if len(buckets) == 1:
        # get_kv_cache_groups: one uniform type (every layer SWA-only) is one group.
        return [layers]
    if len({spec.page_size_bytes for _, spec in layers}) <= 1:
        raise InputError("model", "every V4 cache page is the same size; vLLM then unifies page sizes (not modelled)")
    bucketed = []
    for bucket in buckets.values():
        by_page: dict[int, list[tuple[int, V4LayerSpec]]] = {}
        for layer in bucket:
            by_page.setdefault(layer[1].page_size_bytes, []).append(layer)
        balanced = len({len(v) for v in by_page.values()}) == 1
        most = Counter(spec.page_size_bytes for _, spec in bucket).most_common(1)[0][1]
        bucketed.append((bucket, by_page, balanced, most))
    min_repeats = max((most for _, by_page, balanced, most in bucketed if balanced and len(by_page) > 1), default=0)
    repeats: int | None = None
    if min_repeats:
        repeats = _approximate_gcd([most for _, _, balanced, most in bucketed if balanced], min_repeats)
    # is_state_bucket is false for every V4 bucket once repeats is set (no Mamba / circular buffer); with no
    # repeats every bucket stays whole, so the anchor-bytes cap never splits a V4 bucket.
    groups: list[list[tuple[int, V4LayerSpec]]] = []
    for bucket, by_page, balanced, most in bucketed:
        num_groups = _cdiv(most, repeats) if balanced and repeats is not None else 1
        if repeats is None:
            # Unsplit sliding-window buckets are "state buckets": capped at the states one block already fits.
            num_groups = _state_bucket_groups(bucket, bucketed)
        if num_groups == 1:
            groups.append(bucket)
            continue
        pattern_repeats = list(zip(*by_page.values(), strict=False))
        for i in range(num_groups):
            groups.append([layer for repeat in pattern_repeats[i::num_groups] for layer in repeat])
    return groups


def _state_bucket_groups(bucket: list[tuple[int, V4LayerSpec]], bucketed: list[Any]) -> int:
    """`_get_packed_kv_cache_groups` without a repeat pattern: a sliding-window bucket splits into as many groups
    as it needs so that none is wider than the widest bucket (`anchor_bytes`); other buckets stay whole."""
    if bucket[0][1].sliding_window is None:
        return 1
    anchor = 0
    for other, by_page, _, _ in bucketed:
        n = len(other) if other[0][1].sliding_window is not None else 1  # state buckets: one layer a group
        anchor = max(anchor, sum(_cdiv(len(names), n) * page for page, names in by_page.items()))
    states_per_block = max(anchor // bucket[0][1].page_size_bytes, 1)
    return max(1, _cdiv(len(bucket), states_per_block))


def _layer_tuple_groups(layers: list[tuple[int, V4LayerSpec]], *, pad: bool) -> list[list[tuple[int, V4LayerSpec]]]:
    """kv_cache_utils.py `get_kv_cache_groups` → `group_and_unify_kv_cache_specs` → `_get_kv_cache_groups_uniform_groups`
    of 0.23–0.28: the full-attention layers (C4 / C128 latents, indexer keys) are one group; the sliding-window layers
    are bucketed by (block size, window), and each bucket is split into cdiv(layers per page size, T) groups of
    layer tuples taken T apart, T = `_approximate_gcd` of the buckets' layer-tuple counts (most layers of one page
    size) at least the full-attention group's. With `pad` (0.23–0.26) each sliding-window page is padded up to the
    nearest full-attention page size (`page_size_padded`)."""
    buckets: dict[tuple[int, int | None], list[tuple[int, V4LayerSpec]]] = {}
    for layer in layers:
        buckets.setdefault(layer[1].bucket, []).append(layer)
    if len(buckets) == 1:
        return [layers]  # get_kv_cache_groups: one uniform type (every layer SWA-only) is one group
    full = [layer for layer in layers if layer[1].sliding_window is None]
    if not full:
        raise InputError("model", "V4 layers without a compressed cache: vLLM's layer-tuple grouping asserts one")
    sliding = [bucket for key, bucket in buckets.items() if key[1] is not None]

    def tuples(bucket: list[tuple[int, V4LayerSpec]]) -> int:  # UniformTypeKVCacheSpecs.get_num_layer_tuples
        return Counter(spec.page_size_bytes for _, spec in bucket).most_common(1)[0][1]

    counts = [tuples(full), *(tuples(bucket) for bucket in sliding)]
    num_tuples = _approximate_gcd(counts, counts[0])
    full_pages = sorted({spec.page_size_bytes for _, spec in full})
    groups: list[list[tuple[int, V4LayerSpec]]] = [full]
    for bucket in sliding:
        by_size: dict[int, list[tuple[int, V4LayerSpec]]] = {}
        for index, spec in bucket:
            size = spec.page_size_bytes
            if pad:
                wider = [page for page in full_pages if page >= size]
                if not wider:
                    raise InputError("model", "a V4 window page wider than every compressed page (vLLM asserts)")
                if wider[0] != size:
                    spec = replace(spec, page_size_bytes=wider[0])
                size = wider[0]
            by_size.setdefault(size, []).append((index, spec))
        if len({len(named) for named in by_size.values()}) != 1:
            raise InputError("model", "V4 window caches of unequal layer counts per page size (vLLM asserts)")
        per_size = len(next(iter(by_size.values())))
        num_groups = _cdiv(per_size, num_tuples)
        layer_tuples = list(zip(*by_size.values(), strict=True))
        for i in range(num_groups):
            groups.append([layer for layer_tuple in layer_tuples[i::num_groups] for layer in layer_tuple])
    return groups


def plan_v4_kv(
    card: ModelCard,
    *,
    backend: V4Backend,
    kv_cache_dtype: str,
    kv_budget_bytes: int,
    max_model_len: int,
    max_num_batched_tokens: int,
    concurrent_batches: int,
    release: Release,
    stage: tuple[int, int] | None = None,
    mtp: bool = False,
    holds_mtp: bool | None = None,
    num_speculative_tokens: int = 1,
    tensor_parallel: int = 1,
    indexer_kv_dtype: str = "fp8",
) -> V4KvPlan:
    """One worker's V4 KV pool: groups, blocks, the token count vLLM logs, concurrency and bytes per token.

    `kv_budget_bytes`: the KV memory vLLM gives this worker (GPU: what profiling leaves; CPU: the
    `--kv-cache-memory-bytes` / `VLLM_CPU_KVCACHE_SPACE` budget). `max_num_batched_tokens` as vLLM resolves it
    (vLLM's CPU build without AMX sets it to max(max_model_len, 2048), platforms/cpu.py) and `concurrent_batches`
    as `VllmConfig.max_concurrent_batches` (PP size; 2 with async scheduling at PP 1; PP + 1 with async scheduling
    on the V2 model runner; `V4KvRules.max_concurrent_batches`): from 0.26 their product is `max_in_flight_tokens`,
    which sizes the sliding-window kinds (0.23–0.25: max_num_batched_tokens alone). `release`: the vLLM release
    whose rules apply (`v4_kv_rules`; an unread one is refused).
    `stage`: the decoder layers [start, end) this worker holds (None: all). `mtp`: speculative MTP is on, so the
    engine also has the card's num_nextn_predict_layers MTP layers (each SWA-only); `holds_mtp` (default: the stage
    ends at the last decoder layer) says whether this worker holds them. vLLM forms the groups over the whole engine
    and projects them onto each worker (`get_kv_cache_configs`), then every worker takes the smallest worker's
    num_blocks: for PP call this once per stage and take the min of num_blocks (and so of tokens).
    """
    if card.v4 is None:
        raise InputError("model", f"{card.name} is not a DeepSeek-V4 model (no compress_ratios)")
    if isinstance(backend, str) or not isinstance(backend, V4Backend):
        raise InputError("backend", f"{backend!r}; one of {', '.join(b.value for b in V4Backend)}")
    _positive("kv_budget_bytes", kv_budget_bytes, MAX_KV_BYTES)
    _positive("vllm.max_model_len", max_model_len, MAX_TOKENS)
    _positive("vllm.max_num_batched_tokens", max_num_batched_tokens, MAX_TOKENS)
    _positive("concurrent_batches", concurrent_batches, 64)
    _positive("layout.tensor_parallel", tensor_parallel, 1 << 16)
    _positive("vllm.num_speculative_tokens", num_speculative_tokens, 64)
    rules = v4_kv_rules(release)
    layers_total = card.num_hidden_layers
    start, end = stage if stage is not None else (0, layers_total)
    if not 0 <= start < end <= layers_total:
        raise InputError("stage", f"[{start}, {end}) is not a non-empty range of the {layers_total} decoder layers")
    resolved = resolve_kv_cache_dtype(backend, kv_cache_dtype)
    mtp_layers = card.num_nextn_predict_layers if mtp else 0
    if mtp and mtp_layers == 0:
        raise InputError("vllm.speculative_config", f"{card.name} has no MTP layers (num_nextn_predict_layers 0)")
    if holds_mtp is None:
        holds_mtp = end == layers_total
    # VllmConfig.num_prefill_lookahead_tokens: multi-module MTP (min(MTP layers, speculative tokens) > 1) reads
    # num_speculative_tokens ahead, single-module 1; get_kv_cache_configs retains lookahead - 1 extra SWA tokens.
    # Before 0.28 nothing extra is retained (get_kv_cache_configs has no extra_retained_tokens).
    lookahead = (num_speculative_tokens if min(mtp_layers, num_speculative_tokens) > 1 else 1) if mtp else 0
    if not rules.retains_lookahead:
        lookahead = 0
    in_flight = rules.in_flight_tokens(max_num_batched_tokens, concurrent_batches)
    specs = cache_specs(
        card,
        backend=backend,
        kv_cache_dtype=resolved,
        max_model_len=max_model_len,
        max_in_flight_tokens=in_flight,
        extra_retained_tokens=max(0, lookahead - 1),
        indexer_kv_dtype=indexer_kv_dtype,
    )
    engine = _engine_layers(card, specs, mtp_layers)

    def on_worker(index: int) -> bool:
        return start <= index < end if index < layers_total else holds_mtp is True

    if rules.grouping is Grouping.PACKED:
        engine_groups = _packed_groups(engine)
    else:
        engine_groups = _layer_tuple_groups(engine, pad=rules.grouping is Grouping.LAYER_TUPLES_PADDED)
    groups: list[V4KvGroup] = []
    for members in engine_groups:
        mine = [spec for index, spec in members if on_worker(index)]
        counted = Counter(mine)
        groups.append(
            V4KvGroup(
                members=tuple((spec, counted[spec]) for spec in dict.fromkeys(mine)),
                global_layers=len(members),
                # UniformTypeKVCacheSpecs.max_memory_usage_pages: the most pages any of its layers needs.
                pages_per_request=max(spec.pages_per_request for _, spec in members),
            )
        )
    # _project_kv_cache_groups_to_worker keeps the whole engine's spec for a group with no layer on this worker.
    engine_pages = [sum(spec.page_size_bytes for _, spec in members) for members in engine_groups]
    group_pages = [group.page_size_bytes or engine for group, engine in zip(groups, engine_pages, strict=True)]
    if rules.grouping is Grouping.LAYER_TUPLES_PADDED:
        # _bucket_layers_by_page_size: one slot per page size for the most layers of it one group holds here.
        slots: dict[int, int] = {}
        for group in groups:
            for spec, count in group.members:
                slots[spec.page_size_bytes] = max(slots.get(spec.page_size_bytes, 0), count)
        bytes_per_block = sum(page * count for page, count in slots.items())
    else:
        # _get_kv_cache_bytes_per_block / _get_packed_kv_cache_layout (block-outermost): the widest group's pages;
        # every V4 block_stride_alignment is None or MultipleOf(256) at block size 256, i.e. 1 byte.
        bytes_per_block = max(group.page_size_bytes for group in groups)
    if bytes_per_block == 0:
        raise InputError("stage", f"[{start}, {end}) holds no KV cache layers")
    if rules.grouping is Grouping.LAYER_TUPLES_PADDED:
        # get_max_concurrency_for_kv_cache_config (0.23–0.26): the request's bytes over every group, in blocks of
        # the first (full-attention) group's page.
        if group_pages[0] == 0:
            raise InputError("stage", f"[{start}, {end}) holds no compressed cache (vLLM divides by its page)")
        request_bytes = sum(g.pages_per_request * page for g, page in zip(groups, group_pages, strict=True))
        blocks_per_request = _cdiv(request_bytes, group_pages[0])
    else:
        blocks_per_request = sum(group.pages_per_request for group in groups)
    if rules.null_block_in_check:
        # get_kv_cache_configs → _check_enough_kv_cache_memory: one block is held back (the null block) and the
        # rest must fit one request at max_model_len.
        required = bytes_per_block * (blocks_per_request + 1)
    else:
        # _max_memory_usage_bytes_from_groups (0.23–0.28): every group's pages × the most layer tuples a group has
        # here × one tuple of the full-attention group's distinct page sizes, against the whole budget.
        def tuples(group: V4KvGroup, members: list[tuple[int, V4LayerSpec]]) -> int:
            specs = [spec for spec, count in group.members for _ in range(count)] or [spec for _, spec in members]
            return Counter(spec.page_size_bytes for spec in specs).most_common(1)[0][1]

        first = groups[0].members or tuple(Counter(spec for _, spec in engine_groups[0]).items())
        tuple_bytes = sum({spec.page_size_bytes for spec, _ in first})
        most = max(tuples(group, members) for group, members in zip(groups, engine_groups, strict=True))
        required = sum(group.pages_per_request for group in groups) * most * tuple_bytes
    if required > kv_budget_bytes:
        raise InputError(
            "kv_budget_bytes",
            f"{kv_budget_bytes:,} bytes do not hold one request of {max_model_len:,} tokens: vLLM "
            f"{release_text(release)} needs {required:,} ({blocks_per_request:,} blocks of {bytes_per_block:,} bytes"
            f"{', plus the null block' if rules.null_block_in_check else ''}); raise the budget or lower max_model_len",
        )
    num_blocks = kv_budget_bytes // bytes_per_block
    # get_max_concurrency_for_kv_cache_config and get_kv_cache_capacity, float for float.
    max_concurrency = num_blocks / blocks_per_request
    tokens = int(max_concurrency * max_model_len)
    per_kind = dict.fromkeys((*KINDS, "padding"), 0)
    for group in groups:
        for spec, count in group.members:
            per_kind[spec.kind] += group.pages_per_request * spec.page_size_bytes * count
        per_kind["padding"] += group.pages_per_request * (bytes_per_block - group.page_size_bytes)
    return V4KvPlan(
        release=release,
        required_bytes=required,
        backend=backend,
        kv_cache_dtype=resolved,
        kv_budget_bytes=kv_budget_bytes,
        max_model_len=max_model_len,
        max_in_flight_tokens=in_flight,
        groups=tuple(groups),
        bytes_per_block=bytes_per_block,
        blocks_per_request=blocks_per_request,
        num_blocks=num_blocks,
        tokens=tokens,
        max_concurrency=max_concurrency,
        bytes_per_token=tuple((kind, total / max_model_len) for kind, total in per_kind.items()),
    )


def min_blocks_over_stages(plans: Sequence[V4KvPlan]) -> int:
    """`get_kv_cache_configs` step 5: every worker is cut to the smallest worker's num_blocks."""
    if not plans:
        raise InputError("stage", "no workers given")
    return min(plan.num_blocks for plan in plans)
