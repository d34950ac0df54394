"""Rules from practice: each warning says what is wrong with a layout and why, in one line.

They do not change the memory numbers; they tell the operator what the numbers do not show:
slow links under a collective, kernels that pad or do not exist on a GPU, idle pipeline stages.
Warnings whose `blocks_launch` is true describe a layout vLLM cannot run on this hardware.
`practice_tier` sorts layouts by how far they stray from documented practice; the planner ranks
by it before any estimate (a layout vLLM does not document never outranks one it does).
"""

from __future__ import annotations

from dataclasses import dataclass

from meshdeck.core.cluster import ClusterSpec, LinkClass
from meshdeck.core.gpu_spec import GpuSpec
from meshdeck.core.model_card import CHECKPOINT_FP8_BLOCK, ModelCard
from meshdeck.core.rocm import NEWEST_READ, serving_problems

MLA_COMBINE_SAFE_MAX_SEQS = 256
# How far a layout strays from practice, in ranking order (lower ranks first, whatever the estimate).
PRACTICE_DOCUMENTED = 0
PRACTICE_PP_INSIDE_NVLINK_NODE = 1  # DESIGN.md: TP inside an NVLink domain, PP across nodes
PRACTICE_DP_WITH_PP = 2  # vLLM documents DP engines of TP workers, not DP over pipelines
# The decode estimate cannot tell a DP layout with expert parallel from the same layout without it
# when they differ by a few per cent (only their reserve, hence KV, hence batch differs): inside this
# margin the EP variant ranks first, as vLLM's recipes run it.
EP_TIE_TOLERANCE = 0.05
PRACTICE_NOTES = {  # why a fitting layout ranks below others that fit, whatever its estimate
    PRACTICE_PP_INSIDE_NVLINK_NODE: "ranked below the layouts without PP inside an NVLink node (TP/DP/EP use "
    "those GPUs without pipeline bubbles; PP belongs across nodes)",
    PRACTICE_DP_WITH_PP: "ranked below the documented layouts that fit: vLLM documents DP engines of TP workers, "
    "not DP over pipelines",
}
# FlashMLA-sparse processes a fixed number of query heads per rank and pads to it.
SPARSE_MLA_HEADS_PER_RANK = {"hopper": 64, "blackwell": 128}


@dataclass(frozen=True)
class Warning:
    code: str
    message: str
    blocks_launch: bool = False


@dataclass(frozen=True)
class RuleInputs:
    card: ModelCard
    cluster: ClusterSpec
    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int
    expert_parallel: bool
    tensor_link: LinkClass
    expert_link: LinkClass
    pipeline_link: LinkClass
    tensor_crosses_socket: bool
    pipeline_inside_nvlink_node: bool  # some stage hands off to the next on the same NVLink node
    weights_dtype: str
    max_num_seqs: int
    max_num_seqs_from_user: bool
    expected_concurrency: int
    mtp: bool
    vllm_version: tuple[int, int] | None = None  # the release planned for (what ROCm supports depends on it)


def _gpu_label(gpu: GpuSpec) -> str:
    return "an unknown GPU" if gpu.arch == "unknown" else f"{gpu.name} ({gpu.arch})"


def _gpu_rules(
    card: ModelCard, gpu: GpuSpec, weights_dtype: str, vllm_version: tuple[int, int] | None = None
) -> list[Warning]:
    out: list[Warning] = []
    if gpu.vendor == "amd":  # vLLM on ROCm: what this release cannot run (core.rocm)
        problems = serving_problems(card, weights_dtype, vllm_version or NEWEST_READ)
        out.extend(Warning(code, message, blocks_launch=True) for code, message in problems)
    elif card.is_v4 and gpu.arch not in ("hopper", "blackwell", "unknown"):
        out.append(
            Warning(
                "no_v4_kernels",
                f"DeepSeek-V4's attention (FlashMLA DSV4, FlashInfer SM120) and MXFP4 experts are built for Hopper and "
                f"Blackwell GPUs; vLLM cannot serve it on {_gpu_label(gpu)}",
                blocks_launch=True,
            )
        )
    elif card.has_sparse_indexer and not card.is_v4 and not gpu.runs_sparse_mla_kernels:
        label = "an unknown GPU" if gpu.arch == "unknown" else f"{gpu.name} ({gpu.arch})"
        out.append(
            Warning(
                "no_sparse_mla_kernels",
                f"V3.2's sparse attention (FlashMLA-sparse, DeepGEMM indexer) is built only for Hopper and Blackwell "
                f"data-center GPUs (SM90/SM100); vLLM cannot serve this model on {label}",
                blocks_launch=gpu.arch != "unknown",
            )
        )
    fp8_weights = weights_dtype == "fp8" and card.checkpoint_dtype == CHECKPOINT_FP8_BLOCK
    if fp8_weights and not gpu.fp8_native:
        if gpu.arch == "unknown":
            out.append(
                Warning(
                    "fp8_support_unknown",
                    "GPU given by memory size only: FP8 support unknown; on a GPU without FP8 tensor cores vLLM "
                    "runs the FP8 checkpoint through Marlin weight-only kernels (W8A16)",
                )
            )
        else:
            out.append(
                Warning(
                    "no_native_fp8",
                    f"{gpu.name} has no FP8 tensor cores: vLLM keeps the FP8 weights (same memory) but runs them "
                    "through Marlin weight-only kernels (W8A16, BF16 math) — slower prefill than on Hopper",
                )
            )
    if weights_dtype == "nvfp4" and gpu.arch != "blackwell":
        # vLLM 0.33: ModelOptNvFp4Config.get_min_capability() is 75 (quantization/modelopt.py) and
        # select_nvfp4_moe_backend (fused_moe/oracle/nvfp4.py) falls back to MARLIN where the FlashInfer and
        # CUTLASS FP4 kernels (SM100) are missing: the 4-bit weights are kept and dequantized to BF16
        out.append(
            Warning(
                "nvfp4_weight_only",
                f"NVFP4 needs Blackwell's FP4 tensor cores for W4A4; on {_gpu_label(gpu)} vLLM runs NVFP4 weights through "
                "Marlin weight-only kernels (W4A16: 4-bit in memory, BF16 math) — the memory plan holds, prefill "
                "is slower and the estimate assumes BF16 compute",
            )
        )
    if weights_dtype == "mxfp4" and gpu.arch != "cdna4":
        # vLLM 0.22 quark/schemes/quark_ocp_mx.py: emulate = not current_platform.supports_mx(), and only ROCm's
        # gfx95x (MI350X / MI355X) supports MX (platforms/rocm.py supports_mx); elsewhere the 4-bit weights are
        # kept and dequantized for every matmul
        out.append(
            Warning(
                "mxfp4_emulated",
                f"MXFP4 runs natively on MI350X / MI355X (gfx950) only; on {_gpu_label(gpu)} vLLM emulates it (4-bit weights in "
                "memory, dequantized for every matmul) — the memory plan holds, compute is much slower",
            )
        )
    if gpu.assumed:
        out.append(
            Warning(
                "assumed_gpu",
                "GPU known by memory size only: bandwidths are assumed (1.5 TB/s HBM, PCIe gen4), so the decode "
                "estimate is rough; pick a catalog GPU or --topology for better numbers",
            )
        )
    return out


def gpu_supported(
    card: ModelCard, gpu: GpuSpec, weights_dtype: str, vllm_version: tuple[int, int] | None = None
) -> bool:
    """False when vLLM (this release, None: the newest modelled) cannot run this model on this GPU at all."""
    return not any(w.blocks_launch for w in _gpu_rules(card, gpu, weights_dtype, vllm_version))


def practice_tier(pipeline_parallel: int, data_parallel: int, pipeline_inside_nvlink_node: bool) -> int:
    """PRACTICE_* of a layout: documented, PP inside an NVLink node, or DP over pipelines."""
    if pipeline_parallel > 1 and data_parallel > 1:
        return PRACTICE_DP_WITH_PP
    if pipeline_parallel > 1 and pipeline_inside_nvlink_node:
        return PRACTICE_PP_INSIDE_NVLINK_NODE
    return PRACTICE_DOCUMENTED


def layout_warnings(inputs: RuleInputs) -> tuple[Warning, ...]:
    card, cluster = inputs.card, inputs.cluster
    tp, pp, dp = inputs.tensor_parallel, inputs.pipeline_parallel, inputs.data_parallel
    out = _gpu_rules(card, cluster.gpu, inputs.weights_dtype, inputs.vllm_version)
    if tp > 1 and inputs.tensor_link is LinkClass.NETWORK:
        out.append(
            Warning(
                "tp_over_network",
                f"TP={tp} spans nodes: 2 all-reduces per layer per token cross the network — keep TP inside a "
                "node and use PP or DP+EP across nodes",
            )
        )
    elif tp > 1 and inputs.tensor_link is LinkClass.PCIE:
        socket = " and the CPU interconnect (SYS)" if inputs.tensor_crosses_socket else ""
        out.append(
            Warning(
                "tp_over_pcie",
                f"TP={tp} all-reduces over PCIe{socket} (2 per layer per token): decode will be communication "
                "bound — prefer smaller TP inside an NVLink island, PP across the rest",
            )
        )
    if card.has_sparse_indexer and not card.is_v4 and cluster.gpu.arch in SPARSE_MLA_HEADS_PER_RANK:
        padded = SPARSE_MLA_HEADS_PER_RANK[cluster.gpu.arch]
        local = card.num_attention_heads // tp
        if local < padded:
            better = "TP=2" if cluster.gpu.arch == "hopper" else "TP=1"
            out.append(
                Warning(
                    "sparse_mla_head_padding",
                    f"V3.2 at TP={tp} leaves {local} heads per rank; FlashMLA-sparse on {cluster.gpu.arch.title()} pads "
                    f"to {padded} ({padded // local}x attention compute) — prefer {better} with DP/EP",
                )
            )
    if inputs.expert_parallel and dp == 1:
        out.append(
            Warning(
                "ep_without_dp_attention",
                f"expert parallel over TP={tp} only: attention stays TP-sharded and every rank still runs every "
                "token — vLLM's recipes pair EP with attention data parallel (-dp N --enable-expert-parallel)",
            )
        )
    if pp > 1 and inputs.expected_concurrency < 2 * pp:
        out.append(
            Warning(
                "pp_bubble",
                f"PP={pp} with about {inputs.expected_concurrency} concurrent sequences per replica: stages idle "
                f"(bubble ≈ {max(0.0, 1 - inputs.expected_concurrency / pp):.0%} at one micro-batch per sequence); "
                "PP pays off at high concurrency",
            )
        )
    if pp > 1 and dp > 1:
        out.append(
            Warning(
                "dp_with_pp",
                f"DP={dp} × PP={pp}: vLLM documents data-parallel engines that each own TP GPU workers "
                "(docs/serving/data_parallel_deployment.md), not DP over pipelines — an untested combination, "
                "so it ranks below every documented layout whatever its estimate",
            )
        )
    if pp > 1 and inputs.pipeline_inside_nvlink_node:
        out.append(
            Warning(
                "pp_inside_nvlink_node",
                f"PP={pp} hands stages off inside an NVLink node: TP/DP/EP on the same GPUs keep every GPU busy "
                "without pipeline bubbles (TP inside an NVLink domain, PP across nodes), so it ranks below them "
                "unless nothing else holds the context (--goal context)",
            )
        )
    elif pp > 1 and inputs.pipeline_link is LinkClass.PCIE and cluster.nodes == 1:
        out.append(Warning("pp_inside_node", f"PP={pp} inside one node: stages hand off over PCIe"))
    if dp > 1 and not inputs.expert_parallel and card.n_routed_experts:
        out.append(
            Warning(
                "dp_without_ep",
                f"DP={dp} without --enable-expert-parallel: vLLM runs the MoE layers tensor-parallel over all "
                f"{tp * dp} ranks (every expert cut {tp * dp} ways) and cannot use the DeepEP all2all kernels or "
                "EPLB — vLLM's recipes pair attention DP with --enable-expert-parallel",
            )
        )
    if inputs.expert_link is LinkClass.NETWORK and dp > 1:
        out.append(
            Warning(
                "moe_over_network",
                f"MoE dispatch/combine across {tp * dp} ranks crosses the network every MoE layer; needs a fast "
                "RDMA fabric (and DeepEP all2all kernels for scale)",
            )
        )
    # FlashMLA (CUDA) only: vLLM on ROCm runs V3.2 on ROCM_AITER_MLA_SPARSE, which has no mla_combine kernel.
    if (
        card.has_sparse_indexer
        and not card.is_v4  # V3.2's FlashMLA-sparse recipe advice; V4 runs its own FLASHMLA_SPARSE_DSV4 kernels
        and inputs.max_num_seqs > MLA_COMBINE_SAFE_MAX_SEQS
        and cluster.gpu.vendor != "amd"
    ):
        origin = (
            f"--max-num-seqs {inputs.max_num_seqs}"
            if inputs.max_num_seqs_from_user
            else f"vLLM's default max_num_seqs ({inputs.max_num_seqs} on this GPU)"
        )
        out.append(
            Warning(
                "mla_combine_large_batch",
                f"{origin} > {MLA_COMBINE_SAFE_MAX_SEQS}: V3.2 batches that large can fail in FlashMLA's "
                'mla_combine ("CUDA error … mla_combine.cu … invalid configuration argument", vLLM\'s '
                f"DeepSeek-V3.2 recipe) — if it does, pass --max-num-seqs {MLA_COMBINE_SAFE_MAX_SEQS}",
            )
        )
    return tuple(out)
