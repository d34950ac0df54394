"""The planned-vs-measured view shows what one KV token costs, planned and measured, from the numbers the
real vLLM CPU run logged (`Explicitly set (1.0/23.54) GiB for KV cache`, `CPU KV cache size: 233,008 tokens`)
and the planner's prediction for it (1 GiB, 233,008 tokens: 4,608 bytes of bf16 latent over 4 layers)."""

from __future__ import annotations

from meshdeck.ui.views.deployments.panels import PlannedPanel


def test_kv_bytes_per_token_is_shown_on_both_sides(qtbot) -> None:
    panel = PlannedPanel()
    qtbot.addWidget(panel)
    panel.set_numbers(
        {"weights_gib": 0.01, "available_kv_gib": 1.0, "kv_cache_tokens": 233_008, "max_concurrency": 113.77},
        {
            "node0": {"available_kv_gib": 1.0, "kv_cache_tokens": 233_008, "max_concurrency": 113.77},
            "node1": {"available_kv_gib": 1.0},  # the headless node logs its budget only
        },
    )
    rows = {panel.table.item(r, 0).text(): [panel.table.item(r, c).text() for c in (1, 2, 3)]
            for r in range(panel.table.rowCount())}  # fmt: skip
    assert rows["KV bytes per token"] == ["4,608", "4,608", "+0.0 %"]
    assert rows["KV tokens per DP engine"] == ["233,008", "233,008", "+0.0 %"]
