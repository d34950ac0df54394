"""How each vLLM release sizes the KV cache, as ranges of releases read from their own source.

`--vllm-version X.Y` picks the range holding X.Y; a release outside every range is refused with the
list of ranges, so the plan never claims an accounting it does not reproduce. Every range names the
files and functions of the release wheels (pip download vllm==X.Y.Z) it was read from. What is the
same in all of them: KV budget = total × gpu_memory_utilization − non-KV memory measured around one
dummy forward pass (gpu_worker.py determine_available_memory), and blocks = floor(budget / page size /
layers) (kv_cache_utils.py get_num_blocks) — the reserve terms themselves live in core/reserve.py.
What changes between ranges is below: where CUDA graphs go, the fused-MoE chunk that bounds the
profile run's MoE workspace, which FP8 MoE kernel keeps its workspace past the profile's forward pass,
whether the CUDA-graph memory profile runs inside the measured window, how the logged "GPU KV cache
size" is derived from the blocks, and how the non-KV memory is measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from meshdeck.core.errors import InputError

Release = tuple[int, int]

# What the FP8 block-quantized fused MoE of a tensor-parallel layout (no expert parallel, one DP rank) keeps in
# vLLM's WorkspaceManager (v1/worker/workspace.py) after the profile's forward pass, so that it is still
# allocated while the dummy sampler runs — on Hopper, where the kernel choice below was read:
# "none": fused_experts allocates its caches per call and frees them (0.12–0.13, Fp8MoEMethod.apply);
# "triton": TritonExperts through the modular kernel, (M, top-k, max(N/2, K)) + (M, top-k, max(N, K)) BF16;
# "flashinfer_cutlass": FlashInferExperts through the modular kernel, (M, K) BF16 (its GEMM scratch is its own).
MoeWorkspace = Literal["none", "triton", "flashinfer_cutlass"]
MOE_WORKSPACE_NONE: MoeWorkspace = "none"
MOE_WORKSPACE_TRITON: MoeWorkspace = "triton"
MOE_WORKSPACE_FLASHINFER_CUTLASS: MoeWorkspace = "flashinfer_cutlass"

# how the logged "GPU KV cache size: N tokens" comes from the block count
TokensLogged = Literal["blocks", "concurrency"]
TOKENS_FROM_BLOCKS: TokensLogged = "blocks"  # num_blocks // groups × block_size
TOKENS_FROM_CONCURRENCY: TokensLogged = "concurrency"  # int(num_blocks / ceil(max_model_len / block) × max_len)


@dataclass(frozen=True)
class VllmAccounting:
    """One range of releases that size the KV cache the same way."""

    first: Release
    last: Release
    cudagraph_in_budget: bool  # the CUDA-graph estimate is subtracted from the KV budget by default
    fused_moe_chunk_tokens: int  # the most MoE rows-before-top-k the profile run's workspace is sized for
    tokens_logged: TokensLogged
    flashinfer_sampler: bool  # top-k/top-p sampled with FlashInfer by default on NVIDIA GPUs (else PyTorch-native)
    sorting_sampler: bool  # the PyTorch-native top-k/top-p sorts the logits (before 0.17; later a Triton kernel)
    cudagraph_estimate_env: bool  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS exists (a launch may set it either way)
    summary: str  # what the plan's note says about this range
    source: str  # where in the release's source each trait was read
    rocm_cudagraph_estimate: bool = False  # the graph estimate also runs on ROCm (before 0.26 it is skipped there)
    hopper_fp8_tp_moe_workspace: MoeWorkspace = MOE_WORKSPACE_NONE  # see MoeWorkspace
    graph_profile_in_window: bool = False  # profile_cudagraph_memory runs inside the non-torch measurement
    # The profile's torch peak is the larger of its forward pass and its sampler pass (core/reserve.py). 0.11 keeps
    # the planner's earlier sum of the two: its public DeepSeek-architecture logs (Kimi-K2-Thinking in the
    # calibration table; RedHat's R1-0528 0.11.2 H200 runs) hold 1.1-1.7 GiB more than the larger of the two, for a
    # term not found in 0.11.1's source (its FP8 and Marlin MoE call fused_experts / fused_marlin_moe directly,
    # fp8.py 1301, compressed_tensors_moe.py 1676), while its Llama-3.3-70B runs hold none.
    sampler_after_forward: bool = True

    def holds(self, version: Release) -> bool:
        return self.first <= version <= self.last

    @property
    def label(self) -> str:
        return range_text(self.first, self.last)


def release_text(version: Release) -> str:
    return f"{version[0]}.{version[1]}"


def range_text(first: Release, last: Release) -> str:
    """A range of releases as the notes and refusals name it: "0.21–0.25", or one release."""
    return release_text(first) if first == last else f"{release_text(first)}–{release_text(last)}"


@dataclass(frozen=True)
class ReleaseRange:
    """A run of releases, first to last, that behave alike in what a subclass records."""

    first: Release
    last: Release

    def holds(self, version: Release) -> bool:
        return self.first <= version <= self.last

    @property
    def label(self) -> str:
        return range_text(self.first, self.last)


OUTSIDE = "CUDA graphs captured after sizing, outside the KV budget"
# From 0.18 VLLM_FUSED_MOE_CHUNK_SIZE is gone and fused_moe/modular_kernel.py sizes its workspaces for the
# whole batch, which with DP + EP would be every DP rank's gathered tokens (8 × 8192 on one node). Sized
# that way, the layout vLLM's V3.2 recipe recommends (DP8 + EP on 8×H200, default context) would not fit
# (one public report, LMCache PR 2521, says TP1·DP8 ran out of memory on H200 — the evidence is mixed): the
# DP dispatch of those releases was not read far enough to model it, so the planner keeps 0.11's
# 32768-token bound there (a bound, not a value read from the source; it only matters when DP × batch
# exceeds it).
UNREAD_DP_GATHER_BOUND = 32768
INSIDE = "CUDA graphs' profiled estimate subtracted from the KV budget"

# What 0.12–0.16 share (each range below adds how its FP8 MoE keeps its workspace)
READ_012_016 = (
    "0.12.0 envs.py 790 / 0.17.0 envs.py 825 VLLM_FUSED_MOE_CHUNK_SIZE str(16 * 1024), used by 0.17.0 "
    "fused_moe/modular_kernel.py 1047 min(M, chunk); 0.13.0–0.16.0 utils/mem_utils.py memory_profiling "
    "(the three terms of 0.11), gpu_worker.py without profile_cudagraph_memory and envs.py without "
    "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS (0.17.0 gpu_worker.py 407-408: requested − non_kv only); "
    "0.16.0 kv_cache_utils.py _report_kv_cache_config 1290-1294 (num_blocks // groups × block); 0.12.0–0.16.0 "
    "topk_topp_sampler.py: FlashInfer sampling only with VLLM_USE_FLASHINFER_SAMPLER=1 (envs.py default None); "
)

VLLM_ACCOUNTINGS: tuple[VllmAccounting, ...] = (
    VllmAccounting(
        (0, 11),
        (0, 11),
        cudagraph_in_budget=False,
        fused_moe_chunk_tokens=32768,
        tokens_logged=TOKENS_FROM_BLOCKS,
        flashinfer_sampler=False,
        sorting_sampler=True,
        cudagraph_estimate_env=False,
        summary=f"{OUTSIDE}; fused-MoE chunk 32768 tokens",
        source="0.11.0: v1/worker/gpu_worker.py determine_available_memory 279-280 (requested − "
        "non_kv_cache_memory; utils/__init__.py memory_profiling 2853-2859: weights + torch peak increase + "
        "non-torch increase, no CUDA-graph term); envs.py 778 VLLM_FUSED_MOE_CHUNK_SIZE '32768'; "
        "v1/core/kv_cache_utils.py get_num_blocks 824, logged tokens num_blocks // groups × block 1080; "
        "v1/sample/ops/topk_topp_sampler.py 36-45 samples with FlashInfer only when it is installed, which the "
        "wheel's requirements leave to the `flashinfer` extra (METADATA: flashinfer-python==0.3.1; extra == "
        "'flashinfer'), so a pip install samples natively",
        sampler_after_forward=False,
    ),
    VllmAccounting(
        (0, 12),
        (0, 13),
        cudagraph_in_budget=False,
        fused_moe_chunk_tokens=16384,
        tokens_logged=TOKENS_FROM_BLOCKS,
        flashinfer_sampler=False,
        sorting_sampler=True,
        cudagraph_estimate_env=False,
        summary=f"{OUTSIDE}; fused-MoE chunk 16384 tokens",
        source=READ_012_016
        + "FP8 block MoE: 0.12.0/0.13.0 quantization/fp8.py get_fp8_moe_backend (0.13.0 125-206: DeepGEMM MoE off "
        "by default at TP 8, so TRITON) and Fp8MoEMethod.apply calls fused_experts directly (0.12.0 1315, "
        "0.13.0 1283), whose caches are freed with the call: nothing is kept past the forward pass",
        hopper_fp8_tp_moe_workspace=MOE_WORKSPACE_NONE,
    ),
    VllmAccounting(
        (0, 14),
        (0, 14),
        cudagraph_in_budget=False,
        fused_moe_chunk_tokens=16384,
        tokens_logged=TOKENS_FROM_BLOCKS,
        flashinfer_sampler=False,
        sorting_sampler=True,
        cudagraph_estimate_env=False,
        summary=f"{OUTSIDE}; fused-MoE chunk 16384 tokens; the Triton MoE workspace is kept",
        source="0.14.0: as 0.12–0.13, but the FP8 MoE kernel is chosen by fused_moe/oracle/fp8.py "
        "select_fp8_moe_backend 51-150 (TRITON at TP 8: DeepGEMM MoE off 115-121, FlashInfer only with "
        "VLLM_USE_FLASHINFER_MOE_FP8) and built as a modular kernel (quantization/fp8.py 822 "
        "make_fp8_moe_kernel), whose workspaces come from the WorkspaceManager (fused_moe/modular_kernel.py "
        "855-866 current_workspace_manager().get_simultaneous, v1/worker/workspace.py): TritonExperts."
        "workspace_shapes (fused_moe.py 2324-2339) = (M, top-k, max(N/2, K)) + (M, top-k, max(N, K)), kept "
        "after the forward pass",
        hopper_fp8_tp_moe_workspace=MOE_WORKSPACE_TRITON,
    ),
    VllmAccounting(
        (0, 15),
        (0, 16),
        cudagraph_in_budget=False,
        fused_moe_chunk_tokens=16384,
        tokens_logged=TOKENS_FROM_BLOCKS,
        flashinfer_sampler=False,
        sorting_sampler=True,
        cudagraph_estimate_env=False,
        summary=f"{OUTSIDE}; fused-MoE chunk 16384 tokens",
        source=READ_012_016
        + "FP8 block MoE: 0.16.0 fused_moe/oracle/fp8.py select_fp8_moe_backend 154-166 tries FLASHINFER_CUTLASS "
        "before TRITON (0.15.0 the same list), and flashinfer_cutlass_moe.py takes FP8 block scales on 9.0 "
        "(_supports_quant_scheme 104-130) with workspace_shapes (M, K) and (0,) (187-188): one (M, K) BF16 "
        "buffer is kept (the public 0.16 H200 log names FLASHINFER_CUTLASS)",
        hopper_fp8_tp_moe_workspace=MOE_WORKSPACE_FLASHINFER_CUTLASS,
    ),
    VllmAccounting(
        (0, 17),
        (0, 17),
        cudagraph_in_budget=False,
        fused_moe_chunk_tokens=16384,
        tokens_logged=TOKENS_FROM_BLOCKS,
        flashinfer_sampler=False,
        sorting_sampler=False,
        cudagraph_estimate_env=False,
        summary=f"{OUTSIDE}; fused-MoE chunk 16384 tokens; top-k/top-p in place (Triton)",
        source="0.17.0: as 0.15–0.16 (envs.py 825 VLLM_FUSED_MOE_CHUNK_SIZE, gpu_worker.py 407-408), but "
        "v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p sends 8 rows or more to "
        "topk_topp_triton.apply_top_k_top_p_triton, which masks the fp32 logits in place (0.19.0 lines 965-1030: "
        "one cached buffer of min(SMs, rows) vocabulary rows); FP8 block MoE: fused_moe/oracle/fp8.py "
        "_get_priority_backends 85-95 puts TRITON first on Hopper without EP (FLASHINFER_CUTLASS with EP), whose "
        "TritonExperts workspaces the WorkspaceManager keeps (as 0.14)",
        hopper_fp8_tp_moe_workspace=MOE_WORKSPACE_TRITON,
    ),
    VllmAccounting(
        (0, 18),
        (0, 19),
        cudagraph_in_budget=False,
        fused_moe_chunk_tokens=UNREAD_DP_GATHER_BOUND,
        tokens_logged=TOKENS_FROM_BLOCKS,
        flashinfer_sampler=False,
        sorting_sampler=False,
        cudagraph_estimate_env=True,
        summary=f"{OUTSIDE} (estimated and logged, subtracted only with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1)",
        source="0.18.0/0.19.0: gpu_worker.py determine_available_memory calls profile_cudagraph_memory and "
        "applies it only if envs.VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS (0.18.0 gpu_worker.py 413, 437), "
        "default '0' (0.18.0 envs.py 1636, 0.19.0 envs.py 1655); VLLM_FUSED_MOE_CHUNK_SIZE gone, "
        "0.18.0 fused_moe/modular_kernel.py 1189-1193 allocates the workspaces for M_full; sampling native "
        "unless VLLM_USE_FLASHINFER_SAMPLER=1 (0.18.0 / 0.19.0 envs.py 48 default None); the graph profile runs "
        "inside `with memory_profiling(...)` (0.18.0 gpu_worker.py 384-399, 0.19.0 366-381), whose non-torch "
        "increase is taken at its exit (utils/mem_utils.py 272-274); FP8 block MoE on Hopper without EP: "
        "TRITON first (oracle/fp8.py _get_priority_backends 85-95), workspaces kept (modular_kernel.py "
        "_allocate_buffers 1009-1070, fused_moe.py TritonExperts.workspace_shapes 1979-1994)",
        hopper_fp8_tp_moe_workspace=MOE_WORKSPACE_TRITON,
        graph_profile_in_window=True,
    ),
    VllmAccounting(
        (0, 20),
        (0, 20),
        cudagraph_in_budget=True,
        fused_moe_chunk_tokens=UNREAD_DP_GATHER_BOUND,
        tokens_logged=TOKENS_FROM_BLOCKS,
        flashinfer_sampler=False,
        sorting_sampler=False,
        cudagraph_estimate_env=True,
        summary=f"{INSIDE}",
        source="0.20.0: envs.py 1725 VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default '1'; gpu_worker.py "
        "determine_available_memory 387-425 (torch peak taken before the graph profile; requested − "
        "non_kv − estimate); kv_cache_utils.py get_num_blocks 930; envs.py 48 VLLM_USE_FLASHINFER_SAMPLER "
        "default None (native sampling); the graph profile inside the measured window (gpu_worker.py 366-385) "
        "and the Triton MoE workspace kept, as 0.18–0.19",
        hopper_fp8_tp_moe_workspace=MOE_WORKSPACE_TRITON,
        graph_profile_in_window=True,
    ),
    VllmAccounting(
        (0, 21),
        (0, 25),
        cudagraph_in_budget=True,
        fused_moe_chunk_tokens=UNREAD_DP_GATHER_BOUND,
        tokens_logged=TOKENS_FROM_CONCURRENCY,
        flashinfer_sampler=True,
        sorting_sampler=False,
        cudagraph_estimate_env=True,
        summary=f"{INSIDE} (not on ROCm); logged tokens = concurrency × max_model_len",
        source="0.21.0: gpu_worker.py determine_available_memory 409-447 (the graph estimate only when "
        "current_platform.is_cuda(), 399-407: 'Skip on ROCm/HIP/XPU'); kv_cache_utils.py "
        "_report_kv_cache_config 1708 (num_tokens = int(max_concurrency × max_model_len)), "
        "get_max_concurrency_for_kv_cache_config 872-890; 0.22.0–0.25.0 the same; envs.py 48 "
        "VLLM_USE_FLASHINFER_SAMPLER: bool = True (0.21.0), topk_topp_sampler.py forward_cuda on every GPU "
        "FlashInfer supports (0.22.0 lines 39-47; the B200 logs print 'Using FlashInfer for top-p & top-k "
        "sampling.')",
    ),
    VllmAccounting(
        (0, 26),
        (0, 26),
        cudagraph_in_budget=True,
        fused_moe_chunk_tokens=UNREAD_DP_GATHER_BOUND,
        tokens_logged=TOKENS_FROM_CONCURRENCY,
        flashinfer_sampler=True,
        sorting_sampler=False,
        cudagraph_estimate_env=True,
        rocm_cudagraph_estimate=True,
        summary=f"{INSIDE}; logged tokens = concurrency × max_model_len",
        source="0.26.0: gpu_worker.py 496-506 estimates graphs on current_platform.is_cuda_alike() (ROCm "
        "included); otherwise as 0.21–0.25",
    ),
    VllmAccounting(
        (0, 27),
        (0, 33),
        cudagraph_in_budget=True,
        fused_moe_chunk_tokens=UNREAD_DP_GATHER_BOUND,
        tokens_logged=TOKENS_FROM_CONCURRENCY,
        flashinfer_sampler=True,
        sorting_sampler=False,
        cudagraph_estimate_env=True,
        rocm_cudagraph_estimate=True,
        summary=f"{INSIDE}; non-KV memory measured as the drop in free memory",
        source="0.27.0 utils/mem_utils.py memory_profiling 317-326 (non_kv = total_consumed, the free-memory "
        "drop since the worker started, + transient peak headroom: the same terms once gpu_worker.py "
        "_scoped_allocator_max_split keeps the profile run's blocks releasable, so no term is added); "
        "0.33.0 gpu_worker.py 753-757, kv_cache_utils.py get_kv_cache_capacity 1120-1128; 0.28.0–0.32.0 "
        "the same; 0.33.0 envs.py 51 VLLM_USE_FLASHINFER_SAMPLER: bool = True; graphs estimated on ROCm too "
        "(gpu_worker.py 709-717 is_cuda_alike)",
    ),
)

CUDAGRAPH_ESTIMATE_ENV = "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"


def cudagraph_estimate_from_env(env: Mapping[str, str]) -> bool | None:
    """What a launch environment sets VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS to (vLLM reads bool(int(value)));
    None when unset. A value vLLM cannot read is refused naming the variable."""
    value = env.get(CUDAGRAPH_ESTIMATE_ENV)
    if value is None:
        return None
    try:
        return bool(int(value))
    except ValueError:
        raise InputError(CUDAGRAPH_ESTIMATE_ENV, f"{value!r} is not an integer (vLLM reads it as 0 or 1)") from None


NEWEST_MODELLED: Release = VLLM_ACCOUNTINGS[-1].last


def modelled_ranges() -> str:
    """The modelled ranges, as the refusal and `--help` name them."""
    return ", ".join(accounting.label for accounting in VLLM_ACCOUNTINGS)


@lru_cache(maxsize=64)
def accounting_for(version: Release) -> VllmAccounting:
    """The accounting of this release, or an error naming the flag and every modelled range."""
    for accounting in VLLM_ACCOUNTINGS:
        if accounting.holds(version):
            return accounting
    if version < VLLM_ACCOUNTINGS[0].first:
        why = "releases before 0.11 can run the V0 engine, whose accounting is not modelled"
    else:
        why = "its source has not been read: newer releases are not modelled yet"
    raise InputError("--vllm-version", f"{release_text(version)}: {why}; the planner models vLLM {modelled_ranges()}")
