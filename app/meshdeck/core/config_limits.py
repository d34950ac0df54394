"""How large a checkpoint's config.json may say the model is: physical bounds, one table, each refusal naming the field.

The planner believes the sizes a config.json declares, and the file may come from anyone. Unbounded, a
value makes the planner loop or allocate without end (`num_hidden_layers: 10^9` ran > 60 s and took 3.7 GB,
`num_attention_heads: 10^9` 36 s), claims absurd answers (`hidden_size` 2^62: "4.3e17 B parameters") or
negative ones (a group size of -1: -878 GiB of weights, and a plan that "fits"). Every size is therefore an
integer between its minimum and the limit below, about ten times (at least) the largest real
DeepSeek-V3-architecture checkpoint (DeepSeek-V3 / R1 / V3.1 / V3.2, Kimi-K2 / K2.5); a value outside is
refused as `<file>: <field>` with the limit, never clamped.

| field                              | largest real           | limit     |
|------------------------------------|------------------------|-----------|
| hidden_size                        | 7,168 (DeepSeek-V3)    | 131,072   |
| num_hidden_layers                  | 61 (DeepSeek-V3)       | 1,024     |
| first_k_dense_replace              | 3 (DeepSeek-V3)        | 1,024 (and at most num_hidden_layers) |
| moe_layer_freq                     | 1                      | 1,024     |
| intermediate_size                  | 18,432 (DeepSeek-V3)   | 262,144   |
| moe_intermediate_size              | 2,048 (DeepSeek-V3)    | 262,144   |
| n_routed_experts                   | 384 (Kimi-K2)          | 4,096     |
| n_shared_experts                   | 2 (DeepSeek-V2)        | 64        |
| num_experts_per_tok                | 8 (DeepSeek-V3)        | 4,096 (and at most n_routed_experts) |
| n_group, topk_group                | 8, 4 (DeepSeek-V3)     | 4,096     |
| num_attention_heads                | 128 (DeepSeek-V3)      | 1,024     |
| q_lora_rank                        | 1,536 (DeepSeek-V3)    | 32,768    |
| kv_lora_rank                       | 512 (DeepSeek-V3)      | 16,384    |
| qk_nope_head_dim, v_head_dim       | 128                    | 4,096     |
| qk_rope_head_dim                   | 64                     | 4,096     |
| vocab_size                         | 163,840 (Kimi-K2)      | 4,194,304 |
| max_position_embeddings            | 262,144 (Kimi-K2.5)    | 16,777,216 |
| num_nextn_predict_layers           | 1 (DeepSeek-V3)        | 16        |
| index_n_heads                      | 64 (DeepSeek-V3.2)     | 1,024     |
| index_head_dim                     | 128 (DeepSeek-V3.2)    | 4,096     |
| index_topk                         | 2,048 (DeepSeek-V3.2)  | 65,536    |
| head_dim (V4's one latent head)    | 512 (DeepSeek-V4)      | 16,384    |
| o_lora_rank, o_groups              | 1,024, 16 (V4-Pro)     | 32,768, 1,024 |
| sliding_window                     | 128 (DeepSeek-V4)      | 1,048,576 |
| hc_mult, num_hash_layers           | 4, 3 (DeepSeek-V4)     | 64, 1,024 |
| compress_ratios entries            | 128 (DeepSeek-V4)      | 65,536    |
| quantization group / block sizes   | 128 (AWQ, FP8 blocks)  | 4,096     |
| vision_config hidden_size          | 1,152 (MoonViT)        | 32,768    |
| vision_config num_hidden_layers    | 27 (MoonViT)           | 1,024     |
| vision_config intermediate_size    | 4,304 (MoonViT)        | 131,072   |
| vision_config patch_size           | 14 (MoonViT)           | 1,024     |
| vision_config init_pos_emb_*       | 64 (MoonViT)           | 4,096     |
| vision_config merge_kernel_size    | 2 (MoonViT)            | 64        |

Exclusion lists have their own bounds (module_match.py). services/catalog.py bounds the file itself (1 MiB)
and turns what `json` cannot read (nesting past the recursion limit, integers past Python's 4,300 digits)
into the same one-line errors.
"""

from __future__ import annotations

import math
from typing import Any

from meshdeck.core.errors import InputError
from meshdeck.core.text import printable

GROUP_LIMIT = 4096  # int4 / NVFP4 scale groups, FP8 weight blocks
FIELD_LIMITS: dict[str, int] = {
    "hidden_size": 1 << 17,
    "num_hidden_layers": 1024,
    "first_k_dense_replace": 1024,
    "moe_layer_freq": 1024,
    "intermediate_size": 1 << 18,
    "moe_intermediate_size": 1 << 18,
    "n_routed_experts": 4096,
    "n_shared_experts": 64,
    "num_experts_per_tok": 4096,
    "n_group": 4096,
    "topk_group": 4096,
    "num_attention_heads": 1024,
    "q_lora_rank": 1 << 15,
    "kv_lora_rank": 1 << 14,
    "qk_nope_head_dim": 4096,
    "qk_rope_head_dim": 4096,
    "v_head_dim": 4096,
    "vocab_size": 1 << 22,
    "max_position_embeddings": 1 << 24,
    "num_nextn_predict_layers": 16,
    "index_n_heads": 1024,
    "index_head_dim": 4096,
    "index_topk": 1 << 16,
    "head_dim": 1 << 14,
    "o_lora_rank": 1 << 15,
    "o_groups": 1024,
    "sliding_window": 1 << 20,
    "hc_mult": 64,
    "num_hash_layers": 1024,
    "compress_ratios": 1 << 16,
}
# Fields only a DeepSeek-V4 config.json has (model_card._v4_card reads them); compress_ratios bounds a list's length.
V4_ONLY_FIELDS = (
    "head_dim",
    "o_lora_rank",
    "o_groups",
    "sliding_window",
    "hc_mult",
    "num_hash_layers",
    "compress_ratios",
)
VISION_LIMITS: dict[str, int] = {
    "hidden_size": 1 << 15,
    "num_hidden_layers": 1024,
    "intermediate_size": 1 << 17,
    "patch_size": 1024,
    "init_pos_emb_height": 4096,
    "init_pos_emb_width": 4096,
    "merge_kernel_size": 64,
}


def bounded_int(value: Any, field: str, limit: int, *, minimum: int = 1, what: str = "") -> int:
    """`value` if it is an integer in [minimum, limit] (JSON true/false are not), else InputError naming `field`."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= limit:
        kind = what or ("a positive integer" if minimum == 1 else f"an integer from {minimum}")
        raise InputError(field, f"must be {kind} of at most {limit:,}, got {shown(value)}")
    return value


def shown(value: Any, limit: int = 60) -> str:
    """A config value in an error message: short, escaped, and never raising (a 4,000-digit integer, a list
    nested 900 deep and a 1 MB string are described, not printed)."""
    if value is None or isinstance(value, bool | float):
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() <= 64:
            return str(value)
        return f"an integer of about {int((abs(value).bit_length() - 1) * math.log10(2)) + 1:,} digits"
    if isinstance(value, str):
        return f"'{printable(value, limit=limit)}'"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)} items"
    if isinstance(value, dict):
        return f"an object of {len(value)} keys"
    return f"a {type(value).__name__}"
