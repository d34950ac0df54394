"""Inputs the planner tests share: a Kimi-K2-Thinking config and a cluster builder."""

from __future__ import annotations

from typing import Any

from meshdeck.core.cluster import ClusterSpec, default_inter_node_bytes_per_s, default_intra_node_link
from meshdeck.core.gpu_spec import GpuSpec


def make_cluster(gpu: GpuSpec, nodes: int = 1, gpus_per_node: int = 8, **kwargs: Any) -> ClusterSpec:
    link = kwargs.pop("intra_node_link", default_intra_node_link(gpu))
    inter = kwargs.pop("inter_node_bytes_per_s", default_inter_node_bytes_per_s(gpus_per_node, link))
    return ClusterSpec(nodes, gpus_per_node, gpu, link, inter, **kwargs)


KIMI_K2_THINKING = {
    # moonshotai/Kimi-K2-Thinking config.json: the DeepSeek-V3 architecture with 64 heads, 384 experts,
    # one dense layer, a 163840-token vocabulary and int4 (compressed-tensors W4A16, group 32) experts.
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "kimi_k2",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "n_routed_experts": 384,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "n_group": 1,
    "topk_group": 1,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 163840,
    "max_position_embeddings": 262144,
    "num_nextn_predict_layers": 0,
    "tie_word_embeddings": False,
    "quantization_config": {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {"group_0": {"weights": {"num_bits": 4, "group_size": 32, "symmetric": True}}},
    },
}
