"""What the operator asks the planner, validated at the boundary, and the settings it resolves to.

Field errors name the CLI flag (`--max-model-len`, …) because that is where users type them; the
GUI shows the same text next to the matching field. Defaults follow vLLM's own for `vllm serve`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from meshdeck.core.cluster import ClusterSpec
from meshdeck.core.errors import InputError
from meshdeck.core.gpu_spec import GpuSpec
from meshdeck.core.kv_cache import KvFormat, kv_format, normalize_kv_cache_dtype
from meshdeck.core.model_card import CHECKPOINT_FP8_BLOCK, CHECKPOINT_INT4, ModelCard
from meshdeck.core.reserve import cudagraph_capture_size_count, default_scheduler_limits
from meshdeck.core.serving import Workload
from meshdeck.core.v4_kv import v4_kv_rules
from meshdeck.core.v4_layout import v4_kv_format
from meshdeck.core.v4_releases import check_release_serves
from meshdeck.core.vllm_releases import (
    CUDAGRAPH_ESTIMATE_ENV,
    NEWEST_MODELLED,
    VLLM_ACCOUNTINGS,
    Release,
    accounting_for,
)
from meshdeck.core.weights import WEIGHTS_DTYPES

GOALS = ("throughput", "latency", "context")
ENGINES = ("vllm", "torch")
MODES = ("serve", "train")
DEFAULT_VLLM_VERSION = NEWEST_MODELLED  # the default when no host reports its vLLM: the newest modelled
DEFAULT_ESTIMATE_CONTEXT = 4096


def _positive_int(value: object, flag: str, *, maximum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(flag, f"must be a positive integer, got {value!r}")
    if maximum is not None and value > maximum:
        raise InputError(flag, f"must be at most {maximum}, got {value}")


# The vLLM releases whose memory accounting the reserve reproduces: core/vllm_releases.py, one range per way
# of sizing the KV cache, each read from that release's source.
MODELLED_VLLM_RELEASES: tuple[tuple[Release, Release], ...] = tuple((a.first, a.last) for a in VLLM_ACCOUNTINGS)


MM_ENCODER_TP_MODES = ("weights", "data")  # vLLM's --mm-encoder-tp-mode (config/multimodal.py MMEncoderTPMode)


def check_vllm_version(version: Release) -> Release:
    """The version if the planner models its accounting, else an error naming the flag and the modelled ranges."""
    accounting_for(version)
    return version


def parse_vllm_version(text: str) -> tuple[int, int]:
    parts = text.strip().lstrip("v").split(".")
    try:
        major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except (ValueError, IndexError):
        raise InputError("--vllm-version", f"{text!r} is not a version like 0.16 or 0.21.1") from None
    return check_vllm_version((major, minor))


@dataclass(frozen=True)
class TrainingSettings:
    zero_stage: int = 1
    seq_len: int = 4096
    micro_batch_size: int = 1
    micro_batches: int = 8
    activation_checkpointing: bool = True

    def __post_init__(self) -> None:
        if self.zero_stage not in (0, 1, 2, 3):
            raise InputError("--zero", f"must be 0, 1, 2 or 3, got {self.zero_stage!r}")
        _positive_int(self.seq_len, "--seq-len", maximum=1_048_576)
        _positive_int(self.micro_batch_size, "--micro-batch-size", maximum=4096)
        _positive_int(self.micro_batches, "--micro-batches", maximum=65536)


@dataclass(frozen=True)
class PlanRequest:
    model: ModelCard
    cluster: ClusterSpec
    engine: str = "vllm"
    mode: str = "serve"
    weights_dtype: str | None = None  # None: as the checkpoint ships
    kv_cache_dtype: str = "auto"
    max_model_len: int | None = None  # None: the model's max_position_embeddings (vLLM's default)
    gpu_memory_utilization: float = 0.9
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    mtp: bool = False
    mtp_speculative_tokens: int = 3
    goal: str = "throughput"
    context_tokens: int | None = None  # sequence length the decode estimate assumes
    vllm_version: tuple[int, int] = DEFAULT_VLLM_VERSION
    # Why this release ("the newest modelled", "from the hosts: …"; "" says it from the version) and what picks
    # another: the plan's accounting note says both, in the same words whichever front end planned.
    vllm_version_why: str = ""
    vllm_version_picker: str = "--vllm-version"
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS as the launch sets it (a profile's env); None: the release's default
    cudagraph_memory_estimate: bool | None = None
    mm_encoder_tp_mode: str = "weights"  # a multimodal model's vision tower: split over TP, or whole on every rank
    tensor_parallel: int | None = None
    pipeline_parallel: int | None = None
    data_parallel: int | None = None
    expert_parallel: bool | None = None
    training: TrainingSettings | None = None
    workload: Workload = field(
        default_factory=Workload
    )  # what the serving estimate assumes (--isl, --osl, --concurrency, SLA)
    disaggregated: bool = False  # also plan prefill/decode pools (--disaggregated)
    hosts_without_rdma: tuple[str, ...] = ()  # detected hosts with no active InfiniBand/RoCE port (agents' NICs)

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise InputError("--engine", f"{self.engine!r}; allowed: {', '.join(ENGINES)}")
        if self.mode not in MODES:
            raise InputError("--mode", f"{self.mode!r}; allowed: {', '.join(MODES)}")
        if self.mode == "train" and self.engine != "torch":
            raise InputError("--mode", "train needs --engine torch (vLLM only serves)")
        if self.mode == "train" and self.training is None:
            object.__setattr__(self, "training", TrainingSettings())
        if self.goal not in GOALS:
            raise InputError("--goal", f"{self.goal!r}; allowed: {', '.join(GOALS)}")
        if self.weights_dtype is not None and self.weights_dtype not in WEIGHTS_DTYPES:
            raise InputError("--weights-dtype", f"{self.weights_dtype!r}; allowed: {', '.join(WEIGHTS_DTYPES)}")
        object.__setattr__(self, "kv_cache_dtype", normalize_kv_cache_dtype(self.kv_cache_dtype))
        check_vllm_version(self.vllm_version)
        # DeepSeek-V4 from vLLM 0.20 (core/v4_releases.py); its KV sizing modelled only for the releases read (v4_kv)
        check_release_serves(self.model, self.vllm_version, self.vllm_version_picker)
        if self.model.is_v4 and self.engine == "vllm":
            try:
                v4_kv_rules(self.vllm_version)
            except InputError as exc:
                raise InputError(self.vllm_version_picker, exc.problem) from None
        if self.cudagraph_memory_estimate is not None and not accounting_for(self.vllm_version).cudagraph_estimate_env:
            raise InputError(
                CUDAGRAPH_ESTIMATE_ENV,
                f"vLLM {self.vllm_version[0]}.{self.vllm_version[1]} has no such setting (it exists from 0.18); "
                "leave it unset for this release",
            )
        if self.mm_encoder_tp_mode not in MM_ENCODER_TP_MODES:
            raise InputError(
                "--mm-encoder-tp-mode", f"{self.mm_encoder_tp_mode!r}; allowed: {', '.join(MM_ENCODER_TP_MODES)}"
            )
        if self.mm_encoder_tp_mode != "weights" and not self.model.has_vision_tower:
            raise InputError("--mm-encoder-tp-mode", f"{self.model.name} has no vision tower; leave it at weights")
        util = self.gpu_memory_utilization
        if isinstance(util, bool) or not isinstance(util, int | float) or not 0 < util <= 1:
            raise InputError("--gpu-memory-utilization", f"must be in (0, 1], got {util!r}")
        if self.max_model_len is not None:
            _positive_int(self.max_model_len, "--max-model-len")
            if self.max_model_len > self.model.max_position_embeddings:
                raise InputError(
                    "--max-model-len",
                    f"{self.max_model_len} exceeds the model's max_position_embeddings "
                    f"{self.model.max_position_embeddings} (vLLM refuses it)",
                )
        for value, flag in (
            (self.max_num_seqs, "--max-num-seqs"),
            (self.max_num_batched_tokens, "--max-num-batched-tokens"),
            (self.context_tokens, "--context-tokens"),
            (self.tensor_parallel, "--tensor-parallel"),
            (self.pipeline_parallel, "--pipeline-parallel"),
            (self.data_parallel, "--data-parallel"),
        ):
            if value is not None:
                _positive_int(value, flag)
        _positive_int(self.mtp_speculative_tokens, "--mtp-tokens", maximum=16)
        longest = self.max_model_len or self.model.max_position_embeddings
        if not self.workload.stated and self.workload.tokens_per_request > longest:
            # the default workload shrinks to a short context; a stated one is the operator's and is refused
            half = max(1, longest // 2)
            object.__setattr__(
                self, "workload", replace(self.workload, input_tokens=half, output_tokens=max(1, longest - half))
            )
        if self.workload.tokens_per_request > longest:
            raise InputError(
                "--isl",
                f"--isl {self.workload.input_tokens:,} + --osl {self.workload.output_tokens:,} tokens exceed "
                f"max_model_len {longest:,}: vLLM refuses such a request",
            )
        if self.disaggregated and (self.engine != "vllm" or self.mode != "serve"):
            raise InputError("--disaggregated", "plans vLLM serving pools only (--engine vllm --mode serve)")
        if self.mtp and not self.model.num_nextn_predict_layers:
            raise InputError("--mtp", f"{self.model.name} has no MTP layer (num_nextn_predict_layers is 0)")

    @property
    def train_settings(self) -> TrainingSettings:
        """The training settings of a --mode train request (__post_init__ fills in the defaults)."""
        if self.training is None:
            raise InputError("--mode", "training settings exist only for --mode train")
        return self.training


@dataclass(frozen=True)
class ResolvedSettings:
    """The request with every default filled in the way vLLM would."""

    weights_dtype: str
    kv: KvFormat
    max_model_len: int
    usable_bytes_per_gpu: int
    max_num_seqs: int  # what vLLM will run with: the user's value or vLLM's own default
    max_num_seqs_emitted: int | None  # what goes into --max-num-seqs: only the user's value, else vLLM's default
    max_num_seqs_from_user: bool
    max_num_batched_tokens: int  # likewise: the user's value or vLLM's own default
    context_tokens: int
    nvls_capable: bool  # NCCL NVLink SHARP possible inside a node (NVSwitch Hopper/Blackwell)
    deep_gemm_moe: bool  # FP8 block MoE on Hopper/Blackwell runs DeepGEMM grouped GEMMs
    cudagraph_capture_sizes: int


def scheduler_limits(
    gpu: GpuSpec, max_model_len: int, max_num_seqs: int | None, max_num_batched_tokens: int | None
) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as `vllm serve` resolves them when the user leaves either unset.

    vLLM's EngineArgs._set_default_max_num_seqs_and_batched_tokens_args (OPENAI_API_SERVER context):
    take the per-GPU defaults (get_batch_defaults), cap a defaulted token budget at
    max_num_seqs × max_model_len (chunked prefill is on for DeepSeek), then cap a defaulted
    max_num_seqs at the token budget. Values the user set are kept as they are.
    """
    default_tokens, default_seqs = default_scheduler_limits(gpu)
    seqs = max_num_seqs or default_seqs
    tokens = max_num_batched_tokens
    if tokens is None:
        tokens = min(seqs * max_model_len, default_tokens)
    if max_num_seqs is None:
        seqs = min(seqs, tokens)
    return tokens, seqs


def resolve(request: PlanRequest) -> ResolvedSettings:
    card, gpu = request.model, request.cluster.gpu
    weights = request.weights_dtype or ("int4" if card.checkpoint_dtype == CHECKPOINT_INT4 else card.checkpoint_dtype)
    max_model_len = request.max_model_len or card.max_position_embeddings
    # The memory accounting must use what vLLM will actually run with: its own defaults unless the
    # user sets them (V3.2's mla_combine advice is a warning, never a silent cap — see rules.py).
    tokens, max_num_seqs = scheduler_limits(gpu, max_model_len, request.max_num_seqs, request.max_num_batched_tokens)
    context = request.context_tokens or min(max_model_len, DEFAULT_ESTIMATE_CONTEXT)
    return ResolvedSettings(
        weights_dtype=weights,
        kv=v4_kv_format(card, gpu, request.kv_cache_dtype)
        if card.is_v4
        else kv_format(card, gpu, request.kv_cache_dtype, request.vllm_version),
        max_model_len=max_model_len,
        usable_bytes_per_gpu=int(gpu.torch_visible_bytes * request.gpu_memory_utilization),
        max_num_seqs=max_num_seqs,
        max_num_seqs_emitted=request.max_num_seqs,
        max_num_seqs_from_user=request.max_num_seqs is not None,
        max_num_batched_tokens=tokens,
        context_tokens=min(context, max_model_len),
        nvls_capable=(
            request.cluster.intra_node_link == "nvlink"
            and (request.cluster.topology is None or request.cluster.topology.fully_nvlinked)
            and gpu.arch in ("hopper", "blackwell")
        ),
        deep_gemm_moe=weights == "fp8"
        and card.checkpoint_dtype == CHECKPOINT_FP8_BLOCK
        and gpu.arch in ("hopper", "blackwell"),
        cudagraph_capture_sizes=cudagraph_capture_size_count(max_num_seqs),
    )
