"""Which vLLM release's memory accounting to plan known hosts with.

The issue's rule: the release the agents find on the hosts, else the newest the planner models. The
agent's `inventory` does not carry the installed vLLM (only `checks.versions`, asked at preflight, does),
so a plan for known hosts follows the newest modelled release, except on simulated hosts: their agent
stands in for vLLM with its own model (agent/meshdeck_agent/sim/memory.py) whose accounting has the
traits of the 0.11 range of core/vllm_releases.py — CUDA graphs captured outside the budget, a 32768-token
fused-MoE chunk — so their plan follows 0.11 and the planned-vs-measured table compares like with like. The console planner and a launch's prediction both ask
here, so they plan the same hosts the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from meshdeck_agent.wire_inventory import Inventory

from meshdeck.core.vllm_releases import NEWEST_MODELLED, Release

STAND_IN_VLLM_RELEASE: Release = (0, 11)


def vllm_release_for_hosts(inventories: Mapping[str, Inventory], hosts: Sequence[str]) -> Release:
    """The release a plan for these hosts follows (see the module docstring)."""
    if any(inventories[host].simulated for host in hosts if host in inventories):
        return STAND_IN_VLLM_RELEASE
    return NEWEST_MODELLED
