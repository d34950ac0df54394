"""What DeepSeek-V4 (Flash, Pro) adds to the DeepSeek-V3 shape, read from its config.json.

V4 replaces MLA's latent + rope pair with one 512-wide latent head (`head_dim`, `qk_rope_head_dim` of it rotated),
compresses the KV of most layers (`compress_ratios[i]`: 0 = none, 4 = C4A with a sparse indexer, 128 = C128A), keeps
the last `sliding_window` tokens of every layer uncompressed, splits the output projection into `o_groups` low-rank
groups (`o_lora_rank`), widens the residual stream `hc_mult` times (hyper-connections) and routes the first
`num_hash_layers` MoE layers by token-id hash. Experts ship as FP4 (`expert_dtype: fp4`) over FP8 block-scaled
linears. vLLM 0.32 reads these fields in vllm/models/deepseek_v4/attention.py, compressor.py and the per-platform
model.py files.
"""

from __future__ import annotations

from dataclasses import dataclass

COMPRESS_RATIOS = (0, 1, 4, 128)  # what vLLM's V4 attention accepts (0 and 1: uncompressed, sliding window only)
EXPERT_DTYPES = ("fp4", "fp8", "bf16")


@dataclass(frozen=True)
class V4Shape:
    """The V4-only fields of a DeepSeek-V4 config.json (names follow the file)."""

    head_dim: int  # one latent head: NoPE part head_dim - qk_rope_head_dim, RoPE part qk_rope_head_dim
    o_lora_rank: int
    o_groups: int
    sliding_window: int
    compress_ratios: tuple[int, ...]  # one per decoder layer, then the MTP layers' (vLLM treats those as 1)
    hc_mult: int
    num_hash_layers: int
    expert_dtype: str  # how the checkpoint stores routed experts: fp4 (e2m1 + ue8m0 scale per 32), fp8, bf16
    # Rows of the compressed layers' RoPE cos/sin cache: original_max_position_embeddings × factor of the config's
    # rope_scaling (vLLM common/rope.py build_deepseek_v4_rope -> deepseek_yarn); 0 = max_position_embeddings.
    compressed_rope_positions: int = 0

    def compress_ratio(self, layer_index: int, num_hidden_layers: int) -> int:
        """vLLM's rule (attention.py): max(1, compress_ratios[i]) for decoder layers, 1 for the MTP layers."""
        if layer_index >= num_hidden_layers:
            return 1
        return max(1, self.compress_ratios[layer_index])

    def layers_with_ratio(self, ratio: int, start: int, end: int, num_hidden_layers: int) -> int:
        """Layers in [start, end) whose effective compress ratio is `ratio` (1: sliding window only)."""
        return sum(1 for i in range(start, end) if self.compress_ratio(i, num_hidden_layers) == ratio)
