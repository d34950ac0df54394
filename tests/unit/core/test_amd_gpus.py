"""AMD Instinct GPUs in the planner: memory as torch on ROCm reports it, FP8 as vLLM stores it there, Infinity
Fabric links, vLLM-on-ROCm's weight padding and attention backends, release by release (core.rocm)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from core_planner_inputs import make_cluster
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from meshdeck.core.cluster import ClusterSpec, LinkClass, default_inter_node_bytes_per_s
from meshdeck.core.errors import InputError
from meshdeck.core.gpu_spec import gpu_from_catalog_entry
from meshdeck.core.kv_cache import kv_format
from meshdeck.core.plan_request import parse_vllm_version
from meshdeck.core.planner import plan
from meshdeck.core.throughput import DecodeModel
from meshdeck.core.traffic import TrafficItem
from meshdeck.core.units import GB, GIB
from meshdeck.core.weights import WEIGHTS_DTYPES, ShardShape, invalid_shard_reason, stage_weights
from meshdeck.services.catalog import detected_gpu, load_model

NEWEST = (0, 33)
TP8 = {"tensor_parallel": 8, "pipeline_parallel": 1, "data_parallel": 1, "expert_parallel": False}
# rocm-smi "VRAM Total Memory (B)" = torch's total on ROCm (resources/gpus-amd-SOURCES.md); MI325X derived.
PUBLISHED_VRAM_BYTES = {"MI300X": 206141652992, "MI325X": 274861129728, "MI355X": 309220868096}
MODELS = {name: load_model(name) for name in ("deepseek-v3", "deepseek-v3.2")}
MI308_LOG = (
    Path("/work/shared/data/fixtures")
    / "vllm_log_v1-0.8.x_deepseek-v3_mi308_per-rank-kv-cache_vllm-issue15928_excerpt.txt"
)


def _tp8(result, expert_parallel=False):
    """The one TP8 layout a TP8 request (no DP) plans."""
    (layout,) = result.layouts
    assert (layout.tensor_parallel, layout.data_parallel, layout.expert_parallel) == (8, 1, expert_parallel)
    return layout


@pytest.mark.parametrize("name", sorted(PUBLISHED_VRAM_BYTES))
def test_torch_on_rocm_sees_the_whole_vram_rocm_smi_reports(gpu, name):
    spec = gpu(name)
    assert spec.memory_bytes == PUBLISHED_VRAM_BYTES[name]
    assert spec.torch_visible_bytes == spec.memory_bytes  # no CUDA-style driver carve-out
    assert spec.vendor == "amd"


def test_mi300x_is_the_191_98_gib_vllm_logs_on_rocm(gpu):
    assert round(gpu("MI300X").torch_visible_bytes / GIB, 2) == 191.98  # "total_gpu_memory=191.98GiB"
    assert round(gpu("MI355X").torch_visible_bytes / GIB, 2) == 287.98  # torchtitan "with 287.98GiB memory"


@pytest.mark.parametrize(
    ("name", "fp8_dtype", "capability"),
    [("MI300X", "float8_e4m3fnuz", (9, 4)), ("MI325X", "float8_e4m3fnuz", (9, 4)), ("MI355X", "float8_e4m3fn", (9, 5))],
)
def test_fp8_is_fnuz_on_gfx942_and_ocp_e4m3fn_on_gfx950(gpu, name, fp8_dtype, capability):
    spec = gpu(name)
    assert spec.fp8_native and spec.fp8_dtype == fp8_dtype
    assert spec.compute_capability == capability
    assert gpu("H200-SXM-141GB").fp8_dtype == "float8_e4m3fn"
    assert gpu("A100-SXM4-80GB").fp8_dtype == ""


def test_an_amd_catalog_entry_without_its_links_is_refused_naming_the_field():
    entry = {"name": "MI300X", "arch": "cdna3", "memory_mib": 196592, "hbm_gbps": 5300, "nvlink_gbps": 0}
    with pytest.raises(InputError, match=r"gpus.json: MI300X.infinity_fabric_links: an AMD Instinct GPU needs"):
        gpu_from_catalog_entry({**entry, "pcie_gen": 5})
    with pytest.raises(InputError, match=r"\.arch: 'cdna9'; allowed: .*cdna3, cdna4"):
        gpu_from_catalog_entry({**entry, "arch": "cdna9", "pcie_gen": 5})


@pytest.mark.parametrize("name", sorted(PUBLISHED_VRAM_BYTES))
def test_an_amd_board_defaults_to_infinity_fabric_and_a_nic_per_gpu(gpu, name):
    cluster = make_cluster(gpu(name))
    assert cluster.intra_node_link == "xgmi"
    assert cluster.intra_link(0, 7) is LinkClass.INFINITY_FABRIC
    assert cluster.inter_node_bytes_per_s == default_inter_node_bytes_per_s(8, "nvlink")


@pytest.mark.parametrize(
    ("name", "group", "gb_per_s"),
    [
        ("MI300X", 8, 448.0),  # 7 links x 64 GB/s each way (896 GB/s both ways, AMD's quote)
        ("MI300X", 4, 192.0),  # a 4-GPU group reaches its peers over 3 direct links, no switch
        ("MI300X", 2, 64.0),
        ("MI325X", 8, 448.0),
        ("MI355X", 8, 537.6),  # 7 x 76.8 GB/s (1075.2 GB/s both ways)
        ("MI355X", 0, 537.6),  # group unknown: every link
    ],
)
def test_infinity_fabric_bandwidth_is_one_direct_link_per_peer(gpu, name, group, gb_per_s):
    cluster = make_cluster(gpu(name))
    assert cluster.link_bytes_per_s(LinkClass.INFINITY_FABRIC, group) == pytest.approx(gb_per_s * GB)


def test_nvlink_bandwidth_does_not_depend_on_the_group(gpu):
    cluster = make_cluster(gpu("H200-SXM-141GB"))
    assert cluster.link_bytes_per_s(LinkClass.NVLINK, 2) == cluster.link_bytes_per_s(LinkClass.NVLINK, 8) == 450 * GB


def test_tp_all_reduce_time_on_infinity_fabric_follows_the_group_size(gpu, v32):
    cluster = make_cluster(gpu("MI300X"))
    decode = DecodeModel(
        v32, kv_format(v32, cluster.gpu, "auto", NEWEST), cluster, context_tokens=4096, weights_fp8=True
    )
    pair, board = (
        decode.links((TrafficItem("tp_all_reduce", 1e6, 1, LinkClass.INFINITY_FABRIC, size),)).collectives[0]
        for size in (2, 8)
    )
    assert pair.seconds_per_token == pytest.approx(7 * board.seconds_per_token)


def test_link_flags_that_an_amd_or_nvidia_board_lacks_are_refused_with_the_allowed_ones(gpu):
    with pytest.raises(InputError, match=r"--intra-node-link: MI300X has no NVLink; allowed for it: xgmi, pcie"):
        ClusterSpec(1, 8, gpu("MI300X"), "nvlink", 400e9)
    with pytest.raises(InputError, match=r"--intra-node-link: xgmi .* not H200-SXM-141GB; allowed for it: nvlink"):
        ClusterSpec(1, 8, gpu("H200-SXM-141GB"), "xgmi", 400e9)
    with pytest.raises(InputError, match=r"xgmi .* not 192GB GPU"):
        ClusterSpec(1, 8, __import__("meshdeck.core.gpu_spec").core.gpu_spec.gpu_from_memory(192), "xgmi", 400e9)


def test_an_nvml_style_amd_name_matches_its_catalog_entry_with_the_exact_bytes():
    spec = detected_gpu("AMD Instinct MI300X", 206141652992)
    assert spec.name == "MI300X" and not spec.assumed and spec.has_infinity_fabric


@pytest.mark.parametrize("name", ["MI300X", "MI355X"])
def test_deepseek_v32_fp8_fits_tp8_on_one_8_gpu_board(request_for, v32, name):
    """671B FP8 weights (~642 GiB) over 8 GPUs of 192 / 288 GB: TP8 fits with room for KV."""
    result = plan(request_for(v32, name, vllm_version=NEWEST, **TP8))
    tp8 = _tp8(result)
    assert tp8.valid and tp8.fits and tp8.supported
    assert 78 < tp8.weights_bytes_per_gpu / GIB < 84  # H200's TP8 weights (80.8 GiB) plus ROCm's row padding
    assert tp8.kv_tokens_per_replica > 163_840
    assert result.settings.kv.attention_backend == "ROCM_AITER_MLA_SPARSE"
    assert result.settings.kv.block_size == 16
    assert {item.link for item in tp8.traffic} == {LinkClass.INFINITY_FABRIC}
    assert not any(code in tp8.warning_codes for code in ("no_native_fp8", "fp8_support_unknown", "tp_over_pcie"))
    assert "mla_combine_large_batch" not in tp8.warning_codes  # a FlashMLA (CUDA) failure, not ROCm's


def test_rocm_pads_each_512_byte_aligned_fp8_linear_row_by_256_bytes(request_for, v32):
    """Hand count at TP8 (V3.2): per layer fused_qkv_a 2112 rows (in 7168), q_b 3072 (in 1536), kv_b 4096 (in 512),
    o_proj 7168 (in 2048), indexer wq_b 8192 (in 1536); MoE layers add shared gate_up 512 (in 7168; down's 256-byte
    rows are not aligned); dense layers gate_up 4608 (in 7168; down's 2304 bytes are not). 256 B per padded row."""
    mla = 2112 + 3072 + 4096 + 7168 + 8192
    expected = 256 * (3 * (mla + 4608) + 58 * (mla + 512))
    tp8 = _tp8(plan(request_for(v32, "MI300X", vllm_version=NEWEST, **TP8)))
    assert dict(tp8.weights_by_component)["rocm_row_padding"] == expected == 395_919_360
    same = _tp8(plan(request_for(v32, "H200-SXM-141GB", vllm_version=NEWEST, **TP8)))
    assert "rocm_row_padding" not in dict(same.weights_by_component)
    assert tp8.weights_bytes_per_gpu - same.weights_bytes_per_gpu == expected


def test_rocm_pads_bf16_routed_experts_on_the_triton_moe_backend(request_for, v3):
    """BF16 experts at TP8: w13 rows 256 x 512 (in 7168 x 2 B), w2 rows 256 x 7168 (in 256 x 2 B = 512 B)."""
    tp8 = _tp8(plan(request_for(v3, "MI300X", vllm_version=NEWEST, weights_dtype="bf16", max_model_len=4096, **TP8)))
    per_moe_layer = 256 * (256 * 512 + 256 * 7168)
    padding = dict(tp8.weights_by_component)["rocm_row_padding"]
    assert padding == 58 * per_moe_layer  # BF16 linear layers are not padded
    assert padding / GIB == pytest.approx(27.19, abs=0.01)
    assert not tp8.fits and 0 < tp8.shortfall_bytes < padding  # the padding is what 8 x MI300X cannot hold
    with_ep = {**TP8, "expert_parallel": True}
    ep = _tp8(plan(request_for(v3, "MI355X", vllm_version=NEWEST, weights_dtype="bf16", **with_ep)), True)
    # EP8: 32 whole experts per GPU, w13 4096 rows (in 7168 x 2 B), w2 7168 rows (in 2048 x 2 B)
    assert dict(ep.weights_by_component)["rocm_row_padding"] == 58 * 32 * (4096 + 7168) * 256


@pytest.mark.parametrize(
    ("model", "dtype", "latent", "indexer", "backend"),
    [
        ("v32", "auto", 1152, 132, "ROCM_AITER_MLA_SPARSE"),
        ("v32", "fp8", 576, 132, "ROCM_AITER_MLA_SPARSE"),
        ("v32", "fp8_e4m3", 576, 132, "ROCM_AITER_MLA_SPARSE"),
        ("v3", "bfloat16", 1152, 0, "TRITON_MLA"),
        ("v3", "fp8", 576, 0, "TRITON_MLA"),
    ],
)
def test_rocm_kv_bytes_per_token_are_the_plain_latent(request, gpu, model, dtype, latent, indexer, backend):
    fmt = kv_format(request.getfixturevalue(model), gpu("MI300X"), dtype, NEWEST)
    assert (fmt.latent_bytes_per_token_per_layer, fmt.indexer_bytes_per_token_per_layer) == (latent, indexer)
    assert (fmt.attention_backend, fmt.block_size) == (backend, 16)


@pytest.mark.parametrize("dtype", ["fp8_ds_mla", "nvfp4_ds_mla"])
def test_cuda_only_kv_formats_are_refused_on_rocm_with_the_accepted_values(gpu, v32, dtype):
    with pytest.raises(InputError, match=r"--kv-cache-dtype: .*CUDA FlashMLA.* auto, bfloat16, fp8, fp8_e4m3"):
        kv_format(v32, gpu("MI355X"), dtype, NEWEST)


@pytest.mark.parametrize(
    ("model", "version", "refused"),
    [("v32", (0, 20), True), ("v32", (0, 21), False), ("v3", (0, 17), True), ("v3", (0, 18), False)],
)
def test_an_fp8_kv_cache_on_rocm_follows_the_release(request, gpu, model, version, refused):
    card = request.getfixturevalue(model)
    if refused:
        with pytest.raises(InputError, match=r"--kv-cache-dtype: vLLM 0\.\d+ on ROCm .* allowed: auto, bfloat16"):
            kv_format(card, gpu("MI300X"), "fp8", version)
    else:
        assert kv_format(card, gpu("MI300X"), "fp8", version).kv_cache_dtype == "fp8"


@pytest.mark.parametrize(
    ("version", "blocking_code", "block"),
    [((0, 11), "no_sparse_mla_kernels", None), ((0, 16), "rocm_sparse_block_size", 1), ((0, 18), None, 16)],
)
def test_v32_on_rocm_needs_a_release_with_its_sparse_backend(request_for, v32, version, blocking_code, block):
    result = plan(request_for(v32, "MI300X", vllm_version=version, **TP8))
    tp8 = _tp8(result)
    assert block is None or result.settings.kv.block_size == block
    if blocking_code is None:
        assert tp8.supported and tp8.fits
    else:
        assert not tp8.supported and blocking_code in tp8.warning_codes
        message = tp8.warnings[tp8.warning_codes.index(blocking_code)]
        assert "--vllm-version 0.12" in message or "--block-size 1" in message


@pytest.mark.parametrize(("version", "supported"), [((0, 19), False), ((0, 20), True)])
def test_nvfp4_weights_on_rocm_need_a_release_that_lists_modelopt_fp4(request_for, v3, version, supported):
    result = plan(request_for(v3, "MI355X", vllm_version=version, weights_dtype="nvfp4"))
    assert all(layout.supported == supported for layout in result.layouts if layout.valid)
    if not supported:
        assert "no_nvfp4_on_rocm" in result.layouts[0].warning_codes


def test_the_mi308_log_has_rocm_triton_mla_blocks_and_is_a_release_the_planner_refuses(gpu, v3):
    """vLLM issue 15928 (DeepSeek V3, V1 engine of 0.8.x on 8 MI308X, a China-market gfx942): five ranks logged
    107,312-107,824 KV tokens at max_model_len 32768. The log has no memory lines nor the TP or
    gpu_memory_utilization, so it cannot be a calibration row; what it does show is ROCm's block: every count is
    a whole number of the 16-token blocks the planner models for V3 on ROCm (TRITON_MLA), not of Hopper's 64."""
    tokens = [int(t.replace(",", "")) for t in re.findall(r"GPU KV cache size: ([\d,]+) tokens", MI308_LOG.read_text())]
    assert len(tokens) == 5
    block = kv_format(v3, gpu("MI300X"), "auto", (0, 11)).block_size
    assert block == 16 and all(t % block == 0 for t in tokens)
    hopper_block = kv_format(v3, gpu("H200-SXM-141GB"), "auto", (0, 11)).block_size  # FlashMLA's 64
    assert any(t % hopper_block for t in tokens)
    with pytest.raises(InputError, match=r"--vllm-version: 0\.8: releases before 0\.11 .* the planner models vLLM"):
        parse_vllm_version("0.8")


@settings(max_examples=200, deadline=None)
@given(
    model=st.sampled_from(["deepseek-v3", "deepseek-v3.2"]),
    tensor_parallel=st.sampled_from([1, 2, 4, 8, 16]),
    data_parallel=st.sampled_from([1, 2, 4, 8]),
    expert_parallel=st.booleans(),
    weights_dtype=st.sampled_from(WEIGHTS_DTYPES),
    first_layer=st.integers(0, 60),
    mtp=st.booleans(),
)
def test_rocm_weights_differ_from_cudas_by_exactly_the_row_padding(
    model, tensor_parallel, data_parallel, expert_parallel, weights_dtype, first_layer, mtp
):
    card = MODELS[model]
    shapes = [
        ShardShape(
            tensor_parallel, tensor_parallel * data_parallel, expert_parallel, weights_dtype, rocm_row_padding=pad
        )
        for pad in (False, True)
    ]
    assume(invalid_shard_reason(card, shapes[0]) is None)
    cuda, rocm = (
        stage_weights(card, shape, first_layer, 61, first_stage=first_layer == 0, last_stage=True, mtp=mtp,
                      max_num_batched_tokens=8192)
        for shape in shapes
    )  # fmt: skip
    rocm_parts, cuda_parts = rocm.as_dict(), cuda.as_dict()
    # the MTP layer is one component: its own padded rows stay inside it
    mtp_padding = rocm_parts.get("mtp_layer", 0) - cuda_parts.get("mtp_layer", 0)
    padding = rocm_parts.pop("rocm_row_padding", 0)
    assert rocm.total_bytes - cuda.total_bytes == padding + mtp_padding
    assert {k: v for k, v in rocm_parts.items() if k != "mtp_layer"} == {
        k: v for k, v in cuda_parts.items() if k != "mtp_layer"
    }
    assert padding % 256 == 0 and mtp_padding % 256 == 0 and mtp_padding >= 0
    if weights_dtype in ("int4", "nvfp4"):  # no FP8 linear layers; int4 / NVFP4 experts are not padded
        assert padding == 0
    if weights_dtype == "fp8":
        assert padding > 0  # fused_qkv_a's 7168-byte rows are always 512-aligned
