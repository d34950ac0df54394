"""Parameter counts from the config match what DeepSeek publishes."""

from __future__ import annotations

import pytest
from meshdeck.core.parameters import parameter_counts


def test_v3_main_model_is_671b_and_checkpoint_685b_with_mtp(v3):
    counts = parameter_counts(v3)
    assert counts.main_model / 1e9 == pytest.approx(671, rel=0.005)
    assert counts.checkpoint_total / 1e9 == pytest.approx(685, rel=0.005)
    assert counts.mtp / 1e9 == pytest.approx(14, rel=0.05)


def test_v3_activates_about_37b_per_token(v3):
    assert parameter_counts(v3).active_per_token / 1e9 == pytest.approx(37, rel=0.03)


def test_routed_experts_are_almost_all_of_the_model(v3):
    counts = parameter_counts(v3)
    assert counts.routed_experts == 58 * 256 * 3 * 7168 * 2048
    assert counts.routed_experts / counts.main_model > 0.97


def test_v32_adds_only_the_indexer(v3, v32):
    a, b = parameter_counts(v3), parameter_counts(v32)
    assert b.indexer > 0 and a.indexer == 0
    assert b.main_model - a.main_model == b.indexer
