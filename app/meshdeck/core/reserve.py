"""The memory vLLM keeps back from the KV cache: profile-run activations, sampler, non-torch, CUDA graphs.

vLLM (v1/worker/gpu_worker.py determine_available_memory) runs one dummy forward of
max_num_batched_tokens tokens plus one dummy sampler pass over max_num_seqs rows, then sets
    KV budget = total × gpu_memory_utilization − (weights + torch peak increase + non-torch increase)
The two passes run one after the other (gpu_model_runner.py profile_run: _dummy_run, then
_dummy_sampler_run; 0.16.0 lines 5168-5180, 0.18.0 5516-5528), and the torch peak is the allocator's
high-water mark, so the reserve holds the larger of the two, not their sum: the forward pass's transient
tensors are freed layer by layer, and what is still allocated when the sampler runs is the hidden states
profile_run holds, the encoder cache it clears only afterwards, and the fused-MoE workspace vLLM's
WorkspaceManager keeps (v1/worker/workspace.py; which kernel keeps what is a release trait,
vllm_releases.MoeWorkspace). `sampler_bytes` is what the sampler pass adds above the forward's peak.
Each term here is modelled from what drives it, not fitted as a percentage of the weights:
- activation peak: the residual stream (hidden + residual + layer output) at max_num_batched_tokens,
  plus the largest per-layer transient — the fused-MoE workspace (tokens × top-k rows of
  max(2N, hidden) plus the FP8-quantized copy; with expert parallel the tokens of every DP rank are
  gathered first), the dense MLP, or the attention projections (attention kernels are skipped in the
  profile run: no metadata);
- sampler: one logits row per sequence over the whole vocabulary, on the last pipeline stage only
  (the dummy run samples with top-k and top-p set, v1/worker/gpu_model_runner.py _dummy_sampler_run).
  What is alive at its peak depends on the path the release takes (vllm_releases.py), per logit:
  - PyTorch sort (0.11–0.16 without FlashInfer, topk_topp_sampler.py apply_top_k_top_p): the BF16
    logits (2), their fp32 copy (4), and inside `logits.sort()` the sorted values (4), the int64
    indices (8), the segmented sort's int64 index input (8) and its radix-sort buffers for both (12):
    38 bytes;
  - Triton in place (0.17 on, apply_top_k_top_p_triton for 8 rows or more, with a per-SM row buffer)
    or FlashInfer (forward_cuda → top_k_top_p_sampling_from_logits, default on NVIDIA from 0.21): the
    BF16 logits, the fp32 copy, one more fp32 tensor (the probabilities, resp. the top-k masked
    logits) and one beside it (the exponential draws, resp. the probabilities): 2 + 4 + 4 + 4 = 14;
- multimodal encoder cache: vLLM's profile run keeps the dummy encoder outputs, scattered to the
  encoder budget (max_num_batched_tokens rows of the text hidden size, BF16), alive through the
  language model's dummy pass (gpu_model_runner.py profile_run);
- non-torch: CUDA libraries' workspaces and kernels loaded by the profile run. The NCCL buffers of
  the communicators (vLLM opens a PyNccl and a torch NCCL communicator per group; NVLink SHARP adds
  288 MiB per rank on NVSwitch Hopper/Blackwell groups of more than 2 — NCCL's own log line) and the
  custom all-reduce buffers are created by init_worker_distributed_environment, *before* the worker
  takes the snapshot the non-torch increase is measured from (gpu_worker.py init_device: 0.11.0
  lines 164-182, 0.19.0 263-282, 0.22.0 280-299, 0.33.0 504-541): they are outside the KV budget and
  live in the 1 − gpu_memory_utilization headroom, like CUDA graphs before 0.20 (`communicator_bytes`);
- the CUDA-graph memory profile (0.18 on): it runs inside the window the non-torch increase is measured
  over, and with tensor parallel it leaves non-torch memory behind that no source term accounts for —
  GRAPH_PROFILE_NON_TORCH_BYTES, measured, not read from the source (see its comment);
- CUDA graphs: captured after the KV cache is sized; from vLLM 0.20 their profiled estimate is
  subtracted (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS on by default), older releases leave them
  outside the budget (they then live in the 1 − gpu_memory_utilization headroom).
What differs between releases (where graphs go, the fused-MoE chunk) comes from core/vllm_releases.py.
Checked against public startup logs (tests/unit/core/test_calibration_table.py): the constants below are
not fitted to them; CUDA_LIBRARIES_BYTES is an estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshdeck.core.gpu_spec import GpuSpec
from meshdeck.core.model_card import ModelCard
from meshdeck.core.units import MIB
from meshdeck.core.vllm_releases import (
    MOE_WORKSPACE_FLASHINFER_CUTLASS,
    MOE_WORKSPACE_TRITON,
    VllmAccounting,
    accounting_for,
)

BF16 = 2
DEEP_GEMM_BLOCK_M = 128
SORT_SAMPLER_BYTES_PER_LOGIT = 38  # PyTorch sort top-k/top-p (0.11–0.16)
IN_PLACE_SAMPLER_BYTES_PER_LOGIT = 14  # Triton in-place top-k/top-p (0.17 on) or FlashInfer
CUDA_LIBRARIES_BYTES = (
    768 * MIB
)  # cuBLAS/cuBLASLt workspaces, DeepGEMM/Triton/FlashMLA modules loaded in the profile run
NCCL_COMM_INTRA_NODE_BYTES = 160 * MIB  # P2P/NVLink channel buffers of one communicator
NCCL_COMM_INTER_NODE_BYTES = 256 * MIB  # + network proxy/IB buffers
NCCL_NVLS_PER_RANK_BYTES = 288 * MIB  # "nvlsPerRankSize 301989888" (NCCL on 8×H200, vLLM issue #9699)
CUSTOM_ALL_REDUCE_BYTES = 32 * MIB  # vLLM custom all-reduce buffers (TP inside one NVLink node)
CUDAGRAPH_BYTES_PER_GRAPH = 256 * 1024  # executable graph + pool growth per captured piece
# Non-torch memory held in the measured window from vLLM 0.18 with tensor parallel > 1. Not itemised from the
# source: it is what public H200/B200 logs of a dense model hold beyond every modelled term — RedHat's
# Llama-3.3-70B TP4 runs (ashishkamra/vllm-memory-estimator test_data/validation_db.json at 8b0e21d: 0.18.0 and
# 0.19.0, gpu_memory_utilization 0.92, 8K context) keep 4.155-4.165 GiB out of the budget where 0.75 (CUDA
# libraries) + 1.71 (sampler, 1024 × 128256 × 14 B) + 0.125 (hidden states) are modelled: 1.567-1.577 GiB on
# H200, 1.60 on B200; at 0.16 the same runs leave nothing over (−0.09), and the same logs at TP1 leave ≤ 0.2 GiB.
# 0.18 is where the CUDA-graph memory profile moved inside the window (gpu_worker.py 384-399), so the term is
# charged from there (0.17, without it, is unmeasured). The DeepSeek rows of the calibration table (H200
# 0.18/0.19, B200 0.18/0.19) are held with it, not fitted to it.
GRAPH_PROFILE_NON_TORCH_BYTES = 1610 * MIB


@dataclass(frozen=True)
class GroupMembership:
    """One process group a rank belongs to, as far as NCCL memory is concerned."""

    size: int
    crosses_nodes: bool
    nvls: bool  # NVLink SHARP: NVSwitch Hopper/Blackwell group of > 2 GPUs on one node
    communicators: int = 2  # vLLM GroupCoordinator: torch NCCL process group + PyNcclCommunicator


@dataclass(frozen=True)
class ReserveInputs:
    """What drives the reserve of every GPU of a layout (stage differences and its process groups' NCCL
    memory, `process_memory_for_groups`, are given per stage: see LayoutReserve.for_stage)."""

    tensor_parallel: int
    data_parallel: int
    expert_parallel: bool
    moe_ranks: int
    max_num_batched_tokens: int
    max_num_seqs: int
    cudagraph_capture_sizes: int
    mtp: bool
    vllm_version: tuple[int, int]
    deep_gemm_moe: bool = False  # FP8 block MoE on Hopper/Blackwell: DeepGEMM grouped GEMM workspaces
    speculative_tokens: int = 0  # MTP drafts per step: the verifier samples 1 + k rows per sequence
    sorting_sampler: bool = True  # the dummy sampler pass sorts the logits (vllm_releases.py, see sampler_peak)
    cudagraph_in_budget: bool | None = None  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS as launched; None: default
    rocm: bool = False  # vLLM on ROCm (the graph estimate is skipped there before 0.26)
    gpu_arch: str = ""  # hopper | blackwell | … (gpu_spec.GpuSpec.arch): picks the FP8 MoE kernel whose workspace stays


@dataclass(frozen=True)
class Reserve:
    """Bytes per GPU vLLM keeps out of the KV cache (or needs beside it), by term."""

    activation_peak_bytes: int  # the forward pass's torch peak
    sampler_bytes: int  # what the sampler pass adds above the forward's peak (kept + its logits − forward, ≥ 0)
    non_torch_bytes: int
    cudagraph_bytes: int
    cudagraph_in_budget: bool
    communicator_bytes: int = 0  # NCCL and custom all-reduce buffers, created before vLLM's snapshot
    sampler_pass_bytes: int = 0  # the sampler pass's own logits tensors (sampler_peak)
    kept_bytes: int = 0  # what is still allocated from the forward pass while the sampler runs

    @property
    def in_budget_bytes(self) -> int:
        """What vLLM subtracts from total × gpu_memory_utilization before sizing the KV cache."""
        graphs = self.cudagraph_bytes if self.cudagraph_in_budget else 0
        return self.activation_peak_bytes + self.sampler_bytes + self.non_torch_bytes + graphs

    @property
    def outside_budget_bytes(self) -> int:
        """Memory needed beyond the budget: the communicators, and graphs captured after sizing (vLLM < 0.20)."""
        return self.communicator_bytes + (0 if self.cudagraph_in_budget else self.cudagraph_bytes)

    def as_dict(self) -> dict[str, int | bool]:
        return {
            "activation_peak_bytes": self.activation_peak_bytes,
            "sampler_bytes": self.sampler_bytes,
            "non_torch_bytes": self.non_torch_bytes,
            "cudagraph_bytes": self.cudagraph_bytes,
            "cudagraph_in_budget": self.cudagraph_in_budget,
            "communicator_bytes": self.communicator_bytes,
            "sampler_pass_bytes": self.sampler_pass_bytes,
            "kept_bytes": self.kept_bytes,
        }


def _moe_workspace(
    card: ModelCard, tokens: int, local_intermediate: int, local_experts: int, deep_gemm: bool, chunk: int
) -> int:
    rows = min(tokens, chunk) * card.num_experts_per_tok
    if deep_gemm:
        # DeepGEMM's contiguous grouped layout pads every local expert's rows to its 128-row tile
        rows += local_experts * (DEEP_GEMM_BLOCK_M - 1)
    widest = max(2 * local_intermediate, card.hidden_size)
    # workspace13 (bf16) + workspace2 (bf16) + the FP8-quantized, permuted activations (1 byte)
    return rows * (widest * BF16 + local_intermediate * BF16 + card.hidden_size)


def activation_peak(card: ModelCard, inputs: ReserveInputs) -> int:
    """Torch peak increase of the profile forward pass on one GPU."""
    tokens = inputs.max_num_batched_tokens
    h = card.hidden_size
    tp = inputs.tensor_parallel
    # DeepSeek-V4 carries hc_mult copies of the residual stream between layers (hyper-connections)
    residual = 3 * tokens * h * (card.v4.hc_mult if card.v4 else 1) * BF16
    heads_local = card.num_attention_heads // tp
    attention = tokens * ((card.q_lora_rank or 0) + card.mla_latent_dim) * BF16
    attention += tokens * heads_local * (card.qk_head_dim + card.v_head_dim) * BF16
    if card.has_sparse_indexer:
        attention += tokens * card.index_n_heads * card.index_head_dim * BF16
    dense = tokens * 3 * (card.intermediate_size // tp) * BF16
    # With DP > 1 the MoE layers see every DP rank's tokens (vLLM's default all2all backend gathers them).
    moe_tokens = tokens * inputs.data_parallel
    chunk = accounting_for(inputs.vllm_version).fused_moe_chunk_tokens
    gathered = moe_tokens * h * BF16 if inputs.data_parallel > 1 else 0
    if inputs.expert_parallel:
        local_experts = -(-card.n_routed_experts // inputs.moe_ranks)
        workspace = _moe_workspace(
            card, moe_tokens, card.moe_intermediate_size, local_experts, inputs.deep_gemm_moe, chunk
        )
    else:
        local_inter = card.moe_intermediate_size // inputs.moe_ranks
        workspace = _moe_workspace(card, moe_tokens, local_inter, card.n_routed_experts, inputs.deep_gemm_moe, chunk)
    moe = gathered + workspace
    return residual + max(attention, dense, moe) + encoder_cache_peak(card, inputs)


def encoder_cache_peak(card: ModelCard, inputs: ReserveInputs) -> int:
    """A multimodal model's dummy encoder outputs, kept through the profile's language-model pass."""
    if not card.has_vision_tower:
        return 0
    return inputs.max_num_batched_tokens * card.hidden_size * BF16


def moe_kept_workspace(card: ModelCard, inputs: ReserveInputs, accounting: VllmAccounting) -> int:
    """The FP8 block MoE workspace vLLM's WorkspaceManager keeps after the forward pass (vllm_releases.MoeWorkspace):
    read for a tensor-parallel layout on Hopper (no expert parallel, one DP rank); 0 where it was not read."""
    fp8_block = inputs.deep_gemm_moe  # FP8 block-quantized MoE weights (plan_request sets it for Hopper/Blackwell)
    if not fp8_block or inputs.gpu_arch != "hopper" or inputs.rocm or inputs.expert_parallel:
        return 0
    if inputs.data_parallel != 1:
        return 0
    tokens = inputs.max_num_batched_tokens
    k = card.hidden_size
    n = 2 * (card.moe_intermediate_size // inputs.moe_ranks)  # w13: gate and up
    top_k = card.num_experts_per_tok
    kind = accounting.hopper_fp8_tp_moe_workspace
    if kind == MOE_WORKSPACE_TRITON:
        # modular_kernel._allocate_buffers: workspaces by the chunk, the output (M, K) in workspace13 when it fits
        rows = min(tokens, accounting.fused_moe_chunk_tokens) * top_k
        kept = rows * (max(n // 2, k) + max(n, k)) * BF16
        return kept if tokens * k <= rows * max(n // 2, k) else kept + tokens * k * BF16
    if kind == MOE_WORKSPACE_FLASHINFER_CUTLASS:
        return tokens * k * BF16  # workspace13 (M, K), the output in it; workspace2 (0,)
    return 0


def kept_through_sampler(card: ModelCard, inputs: ReserveInputs, accounting: VllmAccounting) -> int:
    """Still allocated when the dummy sampler runs: the forward's hidden states (profile_run holds them), the
    encoder cache (cleared after the sampler) and the MoE workspace the WorkspaceManager keeps."""
    hidden_states = inputs.max_num_batched_tokens * card.hidden_size * BF16
    return hidden_states + encoder_cache_peak(card, inputs) + moe_kept_workspace(card, inputs, accounting)


def graph_profile_non_torch(inputs: ReserveInputs, accounting: VllmAccounting) -> int:
    """GRAPH_PROFILE_NON_TORCH_BYTES where the release profiles CUDA graphs inside the measured window and
    the platform runs that profile (CUDA; ROCm only from 0.26), with tensor parallel."""
    if not accounting.graph_profile_in_window or inputs.tensor_parallel <= 1:
        return 0
    if inputs.rocm and not accounting.rocm_cudagraph_estimate:
        return 0
    return GRAPH_PROFILE_NON_TORCH_BYTES


def mtp_drafter_peak(card: ModelCard, inputs: ReserveInputs) -> int:
    """The MTP drafter's dummy run on the last stage (its eh_proj input is 2 × hidden wide)."""
    return 2 * inputs.max_num_batched_tokens * card.hidden_size * BF16 if inputs.mtp else 0


def sampler_peak(card: ModelCard, inputs: ReserveInputs) -> int:
    """The dummy sampler pass (last pipeline stage only); with MTP every draft position is sampled too."""
    rows = min(inputs.max_num_seqs * (1 + inputs.speculative_tokens), inputs.max_num_batched_tokens)
    per_logit = SORT_SAMPLER_BYTES_PER_LOGIT if inputs.sorting_sampler else IN_PLACE_SAMPLER_BYTES_PER_LOGIT
    return rows * card.vocab_size * per_logit


@dataclass(frozen=True)
class ProcessMemory:
    """What a rank's libraries and process groups hold: inside the KV budget, and created before it is measured."""

    non_torch_bytes: int  # CUDA libraries' workspaces and kernels, loaded by the profile run
    communicator_bytes: int  # NCCL buffers of every communicator, custom all-reduce: outside the budget


def process_memory_for_groups(groups: tuple[GroupMembership, ...], tensor_parallel: int) -> ProcessMemory:
    """CUDA libraries, and the NCCL buffers of every communicator of these groups (and TP's custom all-reduce)."""
    total = 0
    for group in groups:
        if group.size <= 1:
            continue
        per_comm = NCCL_COMM_INTER_NODE_BYTES if group.crosses_nodes else NCCL_COMM_INTRA_NODE_BYTES
        if group.nvls:
            per_comm += NCCL_NVLS_PER_RANK_BYTES
        total += group.communicators * per_comm
    if tensor_parallel > 1:
        total += CUSTOM_ALL_REDUCE_BYTES
    return ProcessMemory(non_torch_bytes=CUDA_LIBRARIES_BYTES, communicator_bytes=total)


def cudagraph_memory(card: ModelCard, inputs: ReserveInputs, stage_layers: int) -> int:
    """Graphs for every capture size, piecewise per layer (FULL_AND_PIECEWISE), plus the largest batch's pool."""
    pieces = stage_layers + 1
    largest = min(512, inputs.max_num_seqs * 2)
    pool = 3 * largest * card.hidden_size * BF16
    return inputs.cudagraph_capture_sizes * pieces * CUDAGRAPH_BYTES_PER_GRAPH + pool


@dataclass(frozen=True)
class LayoutReserve:
    """The reserve terms of a sharding, computed once; `for_stage` adds what differs per pipeline stage."""

    card: ModelCard
    inputs: ReserveInputs
    activation_peak_bytes: int
    sampler_bytes: int  # the sampler pass's logits tensors (sampler_peak)
    drafter_bytes: int
    cudagraph_in_budget: bool
    kept_bytes: int = 0  # kept_through_sampler
    graph_profile_bytes: int = 0  # graph_profile_non_torch
    sampler_after_forward: bool = True  # vllm_releases.VllmAccounting.sampler_after_forward (0.11: the two summed)

    def for_stage(self, last_stage: bool, stage_layers: int, process: ProcessMemory) -> Reserve:
        """The reserve of one stage; `process` is what its libraries and process groups hold
        (process_memory_for_groups). Only the last stage samples; its torch peak is the larger of the forward
        pass and the sampler pass on top of what the forward keeps."""
        forward = self.activation_peak_bytes + (self.drafter_bytes if last_stage else 0)
        sampler_pass = self.sampler_bytes if last_stage else 0
        above_forward = max(0, self.kept_bytes + sampler_pass - forward) if last_stage else 0
        if not self.sampler_after_forward:
            above_forward = sampler_pass
        return Reserve(
            activation_peak_bytes=forward,
            sampler_bytes=above_forward,
            non_torch_bytes=process.non_torch_bytes + self.graph_profile_bytes,
            cudagraph_bytes=cudagraph_memory(self.card, self.inputs, stage_layers),
            cudagraph_in_budget=self.cudagraph_in_budget,
            communicator_bytes=process.communicator_bytes,
            sampler_pass_bytes=sampler_pass,
            kept_bytes=self.kept_bytes if last_stage else 0,
        )


def cudagraphs_in_budget(inputs: ReserveInputs) -> bool:
    """Whether the KV budget pays for the CUDA graphs: the launch's VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS,
    else the release's default; never on ROCm where the release skips the estimate."""
    accounting = accounting_for(inputs.vllm_version)
    if inputs.rocm and not accounting.rocm_cudagraph_estimate:
        return False
    if inputs.cudagraph_in_budget is not None:
        return inputs.cudagraph_in_budget
    return accounting.cudagraph_in_budget


def layout_reserve(card: ModelCard, inputs: ReserveInputs) -> LayoutReserve:
    accounting = accounting_for(inputs.vllm_version)
    return LayoutReserve(
        card=card,
        inputs=inputs,
        activation_peak_bytes=activation_peak(card, inputs),
        sampler_bytes=sampler_peak(card, inputs),
        drafter_bytes=mtp_drafter_peak(card, inputs),
        cudagraph_in_budget=cudagraphs_in_budget(inputs),
        kept_bytes=kept_through_sampler(card, inputs, accounting),
        graph_profile_bytes=graph_profile_non_torch(inputs, accounting),
        sampler_after_forward=accounting.sampler_after_forward,
    )


def default_scheduler_limits(gpu: GpuSpec) -> tuple[int, int]:
    """vLLM's `vllm serve` defaults (EngineArgs.get_batch_defaults): (max_num_batched_tokens, max_num_seqs)."""
    if gpu.is_large_memory_for_vllm_defaults:
        return 8192, 1024
    return 2048, 256


def cudagraph_capture_size_count(max_num_seqs: int) -> int:
    """vLLM's default capture list: 1, 2, 4, then every 8 up to min(512, 2 × max_num_seqs)."""
    largest = min(512, 2 * max_num_seqs)
    return 3 + max(0, largest // 8)
