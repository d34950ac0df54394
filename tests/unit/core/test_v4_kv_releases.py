"""DeepSeek-V4's KV cache by release (core.v4_kv.V4_KV_RULES): each range's rules on a hand-checkable case, the
numbers each release wheel's own kv_cache_utils gave on V4-Flash's and V4-Pro's CUDA FlashMLA specs (pip download
vllm==X --no-deps, its get_kv_cache_configs / get_max_concurrency_for_kv_cache_config run on CPU), and the refusal of
releases that serve V4 but were not read."""

from __future__ import annotations

from typing import Any

import pytest
from meshdeck.core.errors import InputError
from meshdeck.core.plan_request import PlanRequest
from meshdeck.core.v4_kv import V4_KV_RULES, Grouping, InFlight, V4Backend, V4KvPlan, plan_v4_kv, v4_kv_rules
from meshdeck.core.v4_layout import concurrent_batches
from meshdeck.services.catalog import load_model

GIB = 1 << 30
LOGGED_023_BUDGET = int(32.08 * GIB)  # "Available KV cache memory: 32.08 GiB" of the vLLM 0.23.0 V4-Flash logs


def flash(release: tuple[int, int], max_model_len: int, **kwargs: Any) -> V4KvPlan:
    defaults: dict[str, Any] = {
        "backend": V4Backend.CUDA_FLASHMLA,
        "kv_cache_dtype": "fp8",
        "kv_budget_bytes": LOGGED_023_BUDGET,
        "max_model_len": max_model_len,
        "max_num_batched_tokens": 8192,
        "concurrent_batches": 2,  # async scheduling at PP 1
        "release": release,
    }
    return plan_v4_kv(load_model(kwargs.pop("model", "deepseek-v4-flash")), **{**defaults, **kwargs})


def test_023_layer_tuples_pad_the_state_pages_and_weight_a_request_by_page_size() -> None:
    """V4-Flash at 131072 on 0.23, by hand: 21 C4 + 20 C128 layers (+2 SWA-only); pages fp8_ds_mla rounded to 576 B:
    C4 latent / SWA 37,440, indexer 8,640, C128 latent 1,728, compressor states 32,832 (attention) and 8,640
    (indexer, 8,192 B). Layer-tuple counts [21, 43, 21, 20] → _approximate_gcd from 21: 22 (padding 1 + 1 + 1 + 2 = 5)."""
    plan = flash((0, 23), 131072)
    assert [group.layers for group in plan.groups] == [62, 22, 21, 42, 20]
    # the attention states are padded up to the nearest compressed page: 32,832 → 37,440
    states = {spec.page_size_bytes for spec, _ in plan.groups[3].members}
    assert states == {37440, 8640}
    # a block: each page size × the most layers of it one group holds (22 SWA in one group)
    assert plan.bytes_per_block == 22 * 37440 + 21 * 8640 + 20 * 1728 == 1_039_680
    # one batch in flight: SWA min(127 + 8192, 131072) → 130 + 1 pages; C4 states (window 8, block 4) 2050 + 1;
    # C128 states (window 128, block 8) 1040 + 1; latents 512. Weighted by each group's page, in group 0's pages.
    assert plan.max_in_flight_tokens == 8192
    first = 21 * 37440 + 21 * 8640 + 20 * 1728
    request = 512 * first + 131 * (22 + 21) * 37440 + 2051 * (21 * 8640 + 21 * 37440) + 1041 * 20 * 37440
    assert plan.blocks_per_request == -(-request // first) == 3481
    assert plan.num_blocks == LOGGED_023_BUDGET // 1_039_680 == 33130
    assert plan.tokens == int(33130 / 3481 * 131072)


def test_026_sizes_the_windows_for_every_batch_in_flight() -> None:
    one, two = flash((0, 25), 131072), flash((0, 26), 131072)
    assert (one.max_in_flight_tokens, two.max_in_flight_tokens) == (8192, 16384)
    assert one.bytes_per_block == two.bytes_per_block  # same grouping
    # C4 states: min(7 + 16384, 131072) → 4097 + 1 + 1 pages (cdiv(16391, 4) = 4098, + 1)
    assert two.groups[3].pages_per_request == 4099 and one.groups[3].pages_per_request == 2051


def test_027_drops_the_padding_and_counts_pages_per_group() -> None:
    plan = flash((0, 27), 131072)
    assert [group.layers for group in plan.groups] == [62, 22, 21, 42, 20]  # the same layer tuples
    assert {spec.page_size_bytes for spec, _ in plan.groups[3].members} == {
        32832,
        8640,
    }  # unpadded (8,192 B rounds to 8,640 on its own)
    assert plan.bytes_per_block == 21 * 37440 + 21 * 8640 + 20 * 1728  # the widest group: the compressed one
    assert plan.blocks_per_request == 512 + 259 + 259 + 4099 + 2065


def test_029_packs_the_groups_as_032() -> None:
    for release in ((0, 29), (0, 31), (0, 32)):
        plan = flash(release, 131072)
        assert [group.layers for group in plan.groups] == [22, 21, 62, 42, 20]
        assert (plan.bytes_per_block, plan.blocks_per_request) == (1_002_240, 512 + 259 + 259 + 4099 + 2065)


# What each release's own get_kv_cache_configs + get_max_concurrency_for_kv_cache_config gave at 32.08 GiB,
# max_num_batched_tokens 8192, max_in_flight_tokens 16384 (0.26 on): (num_blocks, tokens at 4K / 64K / 128K / 256K).
WHEELS_FLASH = {
    (0, 23): (33130, (90830, 673242, 1247462, 2175013)),  # 0.24.0 gave the same
    (0, 26): (33130, (90830, 351726, 675441, 1251236)),
    (0, 27): (34368, (83593, 324638, 626172, 1169136)),  # 0.28.0, 0.29.0, 0.31.0 and 0.32.0 gave the same
}


@pytest.mark.parametrize(
    ("release", "wheel"),
    [((0, 23), (0, 23)), ((0, 24), (0, 23)), ((0, 26), (0, 26)), ((0, 27), (0, 27)), ((0, 28), (0, 27))]
    + [((0, minor), (0, 27)) for minor in (29, 31, 32)],
)
def test_flash_at_the_logged_budget_is_what_each_wheel_gave(release, wheel) -> None:
    blocks, tokens = WHEELS_FLASH[wheel]
    plans = [flash(release, length) for length in (4096, 65536, 131072, 262144)]
    assert [plan.num_blocks for plan in plans] == [blocks] * 4
    assert tuple(plan.tokens for plan in plans) == tokens


@pytest.mark.parametrize(
    ("release", "mtp", "tokens"),
    [
        ((0, 23), False, (14939, 40230, 553600)),
        ((0, 23), True, (14939, 40177, 553131)),
        ((0, 26), True, (14939, 40177, 299126)),
        ((0, 27), True, (15328, 37282, 279270)),
        ((0, 28), False, (15328, 37282, 279270)),
    ],
)
def test_pro_with_and_without_mtp_is_what_each_wheel_gave(release, mtp, tokens) -> None:
    plans = [
        flash(release, length, model="deepseek-v4-pro", kv_budget_bytes=int(20.5 * GIB), mtp=mtp)
        for length in (4096, 131072)
    ]
    assert (plans[0].num_blocks, plans[0].tokens, plans[1].tokens) == tokens


def test_the_start_check_follows_the_release() -> None:
    """0.23–0.28 check layer tuples × pages × the compressed group's distinct pages against the whole budget;
    0.29 on check the request's blocks plus the null block."""
    old, new = flash((0, 23), 4096), flash((0, 29), 4096)
    assert old.required_bytes == sum(g.pages_per_request for g in old.groups) * 22 * (37440 + 8640 + 1728)
    assert new.required_bytes == new.bytes_per_block * (new.blocks_per_request + 1)
    with pytest.raises(InputError, match="kv_budget_bytes"):
        flash((0, 23), 4096, kv_budget_bytes=old.required_bytes - 1)
    assert flash((0, 23), 4096, kv_budget_bytes=old.required_bytes).num_blocks > 0


def test_max_concurrent_batches_follows_the_default_model_runner(gpu) -> None:
    h200, mi300 = gpu("H200-SXM-141GB"), gpu("MI300X")
    assert [concurrent_batches((0, 26), pp) for pp in (1, 2, 4)] == [2, 2, 4]  # V1 runner
    assert [concurrent_batches((0, 28), pp, h200) for pp in (1, 2)] == [2, 3]  # V2 on CUDA
    assert [concurrent_batches((0, 30), pp, mi300) for pp in (1, 2)] == [2, 2]  # V1 on ROCm until 0.31
    assert [concurrent_batches((0, 33), pp, mi300) for pp in (1, 2)] == [2, 3]


def test_every_release_serving_v4_that_was_not_read_is_refused() -> None:
    assert [rules.label for rules in V4_KV_RULES] == ["0.23–0.25", "0.26", "0.27", "0.28", "0.29–0.31", "0.32–0.33"]
    assert v4_kv_rules((0, 23)).in_flight is InFlight.ONE_BATCH
    assert v4_kv_rules((0, 30)).grouping is Grouping.PACKED
    for version in ((0, 20), (0, 21), (0, 22), (0, 34)):
        with pytest.raises(InputError) as error:
            v4_kv_rules(version)
        assert error.value.field == "--vllm-version" and "0.23–0.25" in error.value.problem
        with pytest.raises(InputError, match=r"0\.32–0\.33"):
            flash(version, 4096)


def test_the_planner_refuses_v4_on_an_unread_release(request_for) -> None:
    card = load_model("deepseek-v4-flash")
    with pytest.raises(InputError) as error:
        request_for(card, vllm_version=(0, 22))
    assert error.value.field == "--vllm-version"
    assert isinstance(request_for(card, vllm_version=(0, 23)), PlanRequest)
