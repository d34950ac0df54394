"""vLLM on AMD Instinct GPUs (ROCm): what differs from CUDA for DeepSeek V3 / V3.2, release by release.

Every statement here was read in vLLM's own source, the wheels PyPI serves (`pip download vllm==X --no-deps`);
file:line refer to those releases. The GPU numbers themselves (memory, bandwidth, links) live in
resources/gpus.json with their sources in resources/gpus-amd-SOURCES.md.

Architectures. MI300X / MI325X (and the China-market MI308X) are CDNA 3, `gfx942`; MI355X is CDNA 4,
`gfx950`. torch on ROCm reports them as compute capability 9.4 and 9.5 (0.33.0 platforms/rocm.py:245).

Memory. vLLM sizes the KV cache from `torch.cuda.mem_get_info()` (`get_device_total_memory` is
`torch.cuda.get_device_properties().total_memory`, 0.11.0 platforms/rocm.py:312-314; amdsmi's VRAM total in
0.33.0 rocm.py:1089). On ROCm that total is the KFD's whole VRAM — `rocm-smi`'s "VRAM Total Memory", 16 MiB
under the nominal GiB — with no driver carve-out subtracted (CUDA loses ~0.3 %): the catalog's memory is
that figure and `GpuSpec.torch_visible_bytes` takes it whole.

FP8. `fp8_dtype()` is float8_e4m3fnuz on gfx94x and float8_e4m3fn otherwise (0.11.0 rocm.py:397-406, 0.33.0
rocm.py:1259-1268). A DeepSeek FP8 checkpoint (OCP e4m3fn) is converted at load on gfx942 by
`normalize_e4m3fn_to_e4m3fnuz` (quantization/utils/w8a8_utils.py:437): same bytes, the int8 pattern -128
(NaN in fnuz) zeroed and the scales doubled. No memory changes. gfx950 keeps e4m3fn and adds MX formats
(`supports_mx`: gfx95, 0.11.0 rocm.py:387-389).

Weight padding (real memory, not published elsewhere that we found). With `VLLM_ROCM_FP8_PADDING=1`
(the default, envs.py) every FP8 block-quantized linear weight goes through `_maybe_pad_fp8_weight`
(0.11.0 quantization/utils/fp8_utils.py:737-747 from process_fp8_weight_block_strategy :900; 0.33.0
fp8_utils.py:1279-1291 from :1533): when a row of the (out × in) weight is a multiple of 512 bytes the
tensor is re-allocated 256 bytes wider per row and viewed back, so each output row costs 256 bytes more
(0.33.0 keeps that storage: the block kernels' process_weights_after_loading, kernels/linear/scaled_mm/
BlockScaledMMLinearKernel.py:90-97, hands it to replace_parameter, which rebinds `.data` when the stride
differs instead of copying, model_executor/utils.py:125-134).
The routed experts of an FP8 checkpoint are not padded (Fp8MoEMethod has no such step). BF16 routed
experts are, by `VLLM_ROCM_MOE_PADDING=1` (0.11.0 fused_moe/layer.py:399-416; 0.33.0
unquantized_fused_moe_method.py:148-163, kept only on the default Triton MoE backend,
fused_moe/oracle/unquantized.py:495-500; not with EPLB). `padding_bytes_per_row` is that rule.

Graph memory. ROCm captures HIP graphs through the same CUDA-graph code path (CUDAGraphMode, the same
capture sizes); we found no published ROCm-specific figure for their memory, so the planner's CUDA-graph
reserve applies unchanged — a stated assumption, not a measurement. RCCL's buffer sizes are likewise
taken as NCCL's; NVLink SHARP (NVLS) does not exist on Infinity Fabric. vLLM's custom all-reduce is on for
gfx94x/gfx95x (0.11.0 rocm.py:408-413), as inside an NVLink node.

Attention backends (default environment: the launcher sets no VLLM_ROCM_USE_AITER):
- V3 (dense MLA): TRITON_MLA with vLLM's default block size 16 (0.11.0 rocm.py:211-223, block size
  defaulted to 16 at :329-330; AITER MLA needs VLLM_ROCM_USE_AITER=1 or --block-size 1, :224-231).
  TRITON_MLA refuses a quantized KV cache until TRITON_MLA_FP8_KV_FROM ("TritonMLA V1 with FP8 KV cache
  not yet supported", 0.11.0 v1/attention/backends/mla/triton_mla.py:68-70; supported_kv_cache_dtypes
  ["auto"] in 0.12.0/0.13.0 triton_mla.py:31).
- V3.2 (sparse MLA + indexer): "Sparse Attention is not supported on ROCm." in 0.11 (rocm.py:198-200);
  ROCM_AITER_MLA_SPARSE from 0.12 (0.12.0 rocm.py:223-232). Until SPARSE_DEFAULT_BLOCK_FROM the selector
  asserts "Sparse MLA backend on ROCm only supports block size 1 for now." against the cache block size,
  which ROCm defaults to 16 — `vllm serve` needs --block-size 1 (0.12.0-0.16.0 rocm.py); from then on the
  backend declares kernel block sizes [1] (0.18.0 rocm_aiter_mla_sparse.py:90-91) and the KV manager keeps
  ROCm's 16-token cache blocks (0.18.0 rocm.py:692-707), split into kernel blocks of 1. Until
  SPARSE_FP8_KV_FROM it refuses an fp8 KV cache ("ROCMAiterMLASparseBackend doesn't support fp8
  kv_cache_dtype", 0.12.0-0.16.0; supported_kv_cache_dtypes auto/float16/bfloat16 in 0.18.0-0.20.0); in
  0.33.0 it takes auto/bfloat16/fp8/fp8_e4m3 and block sizes [1, MultipleOf(16)]
  (rocm_aiter_mla_sparse.py:351-362). The indexer's kernel blocks on ROCm are [1] (0.18.0 mla/indexer.py:39-40),
  [1, 64] (0.21.0), [1, MultipleOf(16)] (0.33.0 mla/indexer.py:285-286): each divides the 16-token cache block
  (backend.py supports_block_size: "block_size % supported_size == 0"), so ROCm's default of 16 stands.
  fp8_ds_mla and nvfp4_ds_mla are CUDA FlashMLA formats no ROCm backend lists. The latent is the plain
  kv_lora_rank + rope (576 values, 2 or 1 bytes) plus the indexer's 132 B.

Quantization. `supported_quantization` lists fp8, awq, gptq in every modelled release; ModelOpt's NVFP4
(`modelopt_fp4`) only from MODELOPT_FP4_FROM (0.11.0 rocm.py:178-181 lists petit_nvfp4 but not
modelopt_fp4; 0.33.0 rocm.py:668-692 lists it).
"""

from __future__ import annotations

from meshdeck.core.model_card import ModelCard

# CDNA generation -> the gfx target vLLM tests (gcnArchName) and the compute capability torch reports.
GFX_TARGETS = {"cdna3": "gfx942", "cdna4": "gfx950"}
COMPUTE_CAPABILITY = {"cdna3": (9, 4), "cdna4": (9, 5)}
ROCM_ARCHITECTURES = tuple(GFX_TARGETS)

# The --kv-cache-dtype values some ROCm MLA backend lists (0.33.0 rocm_aiter_mla_sparse.py:352-358,
# triton_mla.py supported_kv_cache_dtypes); float16 is refused for a BF16 model as on CUDA.
ROCM_KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3")

NEWEST_READ = (0, 33)  # the newest release whose ROCm source these facts were read in
SPARSE_MLA_FROM = (0, 12)  # ROCM_AITER_MLA_SPARSE exists (0.12.0 platforms/rocm.py:223-232)
SPARSE_DEFAULT_BLOCK_FROM = (0, 18)  # no block-size-1 assert in 0.18.0 (0.17.0 rocm.py:370 still has it)
SPARSE_FP8_KV_FROM = (0, 21)  # 0.20.0 rocm_aiter_mla_sparse.py:85-89 auto/float16/bfloat16; 0.21.0 :266-272 adds fp8
TRITON_MLA_FP8_KV_FROM = (0, 18)  # 0.17.0 triton_mla.py:31 auto/bfloat16; 0.18.0 :32 adds fp8, fp8_e4m3
MODELOPT_FP4_FROM = (0, 20)  # 0.19.0 rocm.py:367 petit_nvfp4 only; 0.20.0 rocm.py:420 "modelopt_fp4"

ROW_PADDING_BYTES = 256  # F.pad(weight, (0, 256 // element_size)) in _maybe_pad_fp8_weight / _maybe_pad_weight
ROW_ALIGNMENT_BYTES = 512  # the padding applies when stride(-2) * element_size % 512 == 0


def is_rocm_arch(arch: str) -> bool:
    return arch in GFX_TARGETS


def fp8_torch_dtype(arch: str) -> str:
    """The torch dtype vLLM stores FP8 weights and an fp8 KV cache in on this architecture."""
    return "float8_e4m3fnuz" if arch == "cdna3" else "float8_e4m3fn"


def padding_bytes_per_row(in_features: int, element_bytes: int) -> int:
    """Extra bytes vLLM on ROCm allocates per output row of a padded weight (0 when the row is not 512-aligned)."""
    return ROW_PADDING_BYTES if (in_features * element_bytes) % ROW_ALIGNMENT_BYTES == 0 else 0


def rocm_note(arch: str, gpu_name: str) -> str:
    """The plan note that says what the planner does differently for an AMD GPU."""
    fp8 = fp8_torch_dtype(arch)
    conversion = (
        " (vLLM converts the checkpoint's e4m3fn at load: same bytes, scales doubled)" if arch == "cdna3" else ""
    )
    return (
        f"{gpu_name} ({GFX_TARGETS[arch]}, vLLM on ROCm): FP8 kept as {fp8}{conversion}; FP8 linear and BF16 expert "
        "weights padded 256 B per row as VLLM_ROCM_FP8_PADDING / VLLM_ROCM_MOE_PADDING do (rocm_row_padding); "
        "torch sees the whole VRAM; HIP-graph and RCCL memory taken as CUDA's (no ROCm figure published)"
    )


def _release(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def sparse_block_size(vllm_version: tuple[int, int]) -> int:
    """The KV cache block V3.2 runs with on ROCm: 1 (asserted) before SPARSE_DEFAULT_BLOCK_FROM, else ROCm's 16."""
    return 16 if vllm_version >= SPARSE_DEFAULT_BLOCK_FROM else 1


def kv_dtype_problem(card: ModelCard, kv_cache_dtype: str, vllm_version: tuple[int, int]) -> str | None:
    """Why vLLM on ROCm refuses this --kv-cache-dtype for this model in this release, or None."""
    allowed = ", ".join(ROCM_KV_CACHE_DTYPES)
    if kv_cache_dtype not in ROCM_KV_CACHE_DTYPES:
        return (
            f"{kv_cache_dtype} is a CUDA FlashMLA cache format no ROCm attention backend lists; on AMD GPUs vLLM "
            f"serves DeepSeek with {allowed}"
        )
    quantized = kv_cache_dtype.startswith("fp8")
    if quantized and card.has_sparse_indexer and vllm_version < SPARSE_FP8_KV_FROM:
        return (
            f"vLLM {_release(vllm_version)} on ROCm serves V3.2 only with a BF16 KV cache (ROCMAiterMLASparseBackend "
            f"refuses fp8 before {_release(SPARSE_FP8_KV_FROM)}); allowed: auto, bfloat16"
        )
    if quantized and not card.has_sparse_indexer and vllm_version < TRITON_MLA_FP8_KV_FROM:
        return (
            f"vLLM {_release(vllm_version)} on ROCm runs {card.name}'s MLA on TRITON_MLA, which refuses a quantized "
            f"KV cache before {_release(TRITON_MLA_FP8_KV_FROM)} (AITER MLA needs VLLM_ROCM_USE_AITER=1 and "
            "--block-size 1, which the launcher does not set); allowed: auto, bfloat16"
        )
    return None


def serving_problems(card: ModelCard, weights_dtype: str, vllm_version: tuple[int, int]) -> list[tuple[str, str]]:
    """(code, message) for each reason vLLM on ROCm cannot serve this model in this release at all."""
    out: list[tuple[str, str]] = []
    release = _release(vllm_version)
    if card.has_sparse_indexer and vllm_version < SPARSE_MLA_FROM:
        out.append(
            (
                "no_sparse_mla_kernels",
                f'vLLM {release} cannot serve V3.2 on AMD GPUs ("Sparse Attention is not supported on ROCm"); '
                f"ROCm's sparse MLA backend (ROCM_AITER_MLA_SPARSE) arrived in {_release(SPARSE_MLA_FROM)} — "
                f"plan with --vllm-version {_release(SPARSE_MLA_FROM)} or newer",
            )
        )
    elif card.has_sparse_indexer and vllm_version < SPARSE_DEFAULT_BLOCK_FROM:
        out.append(
            (
                "rocm_sparse_block_size",
                f"vLLM {release} runs V3.2 on ROCm only with --block-size 1 (ROCM_AITER_MLA_SPARSE asserts it before "
                f"{_release(SPARSE_DEFAULT_BLOCK_FROM)}), a flag the launcher does not emit; the KV numbers assume it — "
                f"plan with --vllm-version {_release(SPARSE_DEFAULT_BLOCK_FROM)} or newer",
            )
        )
    if weights_dtype == "nvfp4" and vllm_version < MODELOPT_FP4_FROM:
        out.append(
            (
                "no_nvfp4_on_rocm",
                f"vLLM {release} does not list modelopt_fp4 among ROCm's quantizations (only from "
                f"{_release(MODELOPT_FP4_FROM)}); serve NVFP4 checkpoints with a newer vLLM or use fp8 weights",
            )
        )
    return out
