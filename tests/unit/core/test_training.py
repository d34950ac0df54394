"""Training plans: ZeRO partitioning, activation checkpointing, the 1F1B bubble and traffic per step."""

from __future__ import annotations

import pytest
from meshdeck.core.plan_request import TrainingSettings
from meshdeck.core.planner import plan


def train(request_for, card, nodes=16, **kw):
    training = TrainingSettings(**{k: kw.pop(k) for k in list(kw) if k in TrainingSettings.__dataclass_fields__})
    result = plan(request_for(card, "H100-SXM5-80GB", nodes, 8, engine="torch", mode="train", training=training, **kw))
    return result.training


FIXED = {"tensor_parallel": 8, "pipeline_parallel": 4, "data_parallel": 4, "expert_parallel": False}


def test_higher_zero_stages_shard_more_of_the_16_bytes_per_parameter(request_for, v3):
    totals = []
    for stage in (0, 1, 2, 3):
        layout = train(request_for, v3, zero_stage=stage, **FIXED).layouts[0]
        totals.append(layout.params_bytes + layout.grads_bytes + layout.optimizer_bytes)
        if stage == 0:
            assert layout.optimizer_bytes == pytest.approx(6 * layout.params_bytes, rel=1e-6)
    assert totals == sorted(totals, reverse=True) and totals[3] < totals[0] / 3


def test_activation_checkpointing_keeps_far_less(request_for, v3):
    on = train(request_for, v3, activation_checkpointing=True, **FIXED).layouts[0]
    off = train(request_for, v3, activation_checkpointing=False, **FIXED).layouts[0]
    assert on.activations_bytes < off.activations_bytes / 5
    assert on.activations_bytes_without_checkpointing == off.activations_bytes


def test_1f1b_bubble_is_pp_minus_one_over_micro_batches_plus_pp_minus_one(request_for, v3):
    layout = train(request_for, v3, micro_batches=12, **FIXED).layouts[0]
    assert layout.bubble_fraction == pytest.approx(3 / 15)


def test_zero3_adds_parameter_all_gathers_to_dp_traffic(request_for, v3):
    z1 = dict((name, volume) for name, volume, _ in train(request_for, v3, zero_stage=1, **FIXED).layouts[0].traffic)
    z3 = dict((name, volume) for name, volume, _ in train(request_for, v3, zero_stage=3, **FIXED).layouts[0].traffic)
    assert z3["dp_gradients+zero3_params"] == pytest.approx(1.5 * z1["dp_gradients"])
    assert {"tp_all_reduce", "pp_activations"} <= z1.keys()


def test_expert_parallel_adds_all_to_all_and_shrinks_expert_memory(request_for, v3):
    no_ep = train(request_for, v3, **FIXED).layouts[0]
    ep = train(request_for, v3, **{**FIXED, "expert_parallel": True}).layouts[0]
    assert ep.parameters_per_gpu < no_ep.parameters_per_gpu / 2
    assert "ep_all_to_all" in {name for name, _, _ in ep.traffic}


def test_train_mode_needs_the_torch_engine(request_for, v3):
    from meshdeck.core.errors import InputError

    with pytest.raises(InputError) as err:
        request_for(v3, mode="train")
    assert err.value.field == "--mode"


def test_strategy_table_puts_the_classic_strategies_in_numbers_for_this_cluster(request_for, v3):
    result = train(request_for, v3, nodes=32, zero_stage=1)
    rows = dict(result.strategies)
    assert {"DP", "ZeRO-1", "ZeRO-2", "ZeRO-3", "TP8", "PP16", "3D"} <= rows.keys()
    assert rows["DP"].total_bytes > rows["ZeRO-1"].total_bytes > rows["ZeRO-2"].total_bytes > rows["ZeRO-3"].total_bytes
    assert not rows["DP"].fits and rows["ZeRO-3"].fits  # 671B × 16 B never fits one GPU; ZeRO-3 over 256 does
    assert rows["3D"] is result.layouts[0]
    needs = rows["TP8"].link_needs_bytes_per_s()
    assert needs["tp_all_reduce"] > 0 and needs["dp_gradients"] > 0
    assert "strategies" in result.as_dict()
