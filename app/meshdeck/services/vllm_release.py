"""Which vLLM release's memory accounting to plan known hosts with.

The issue's rule: the release the agents find on the hosts, else the newest the planner models. The
agent's `inventory` does not carry the installed vLLM; its `checks.versions` does (preflight asks it,
and so does preparing a launch, for the launch's prediction: `release_from_reports`). The console
planner plans from inventories alone, so it follows the newest modelled release — except on simulated
hosts, in both places: their agent stands in for vLLM with its own model (agent/meshdeck_agent/sim/
memory.py) whose accounting has the traits of the 0.11 range of core/vllm_releases.py — CUDA graphs
captured outside the budget, a 32768-token fused-MoE chunk — so their plan follows 0.11 and the
planned-vs-measured table compares like with like.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from meshdeck_agent.wire_inventory import Inventory

from meshdeck.core.errors import InputError
from meshdeck.core.text import printable
from meshdeck.core.vllm_releases import NEWEST_MODELLED, Release, accounting_for, release_text

STAND_IN_VLLM_RELEASE: Release = (0, 11)
_RELEASE = re.compile(r"v?(\d{1,3})\.(\d{1,3})(?:\D|$)")


def vllm_release_for_hosts(inventories: Mapping[str, Inventory], hosts: Sequence[str]) -> Release:
    """The release a plan for these hosts follows when no host has said which vLLM it runs."""
    return release_for_hosts(inventories, hosts)[0]


def release_for_hosts(inventories: Mapping[str, Inventory], hosts: Sequence[str]) -> tuple[Release, str]:
    """vllm_release_for_hosts and why, in the words the plan's accounting note uses ("from the hosts: …")."""
    if any(inventories[host].simulated for host in hosts if host in inventories):
        return STAND_IN_VLLM_RELEASE, (
            f"from the hosts: their simulated agents model vLLM {release_text(STAND_IN_VLLM_RELEASE)}'s accounting"
        )
    return NEWEST_MODELLED, "from the hosts: their inventories do not name their vLLM, so the newest modelled"


def release_from_reports(reports: Mapping[str, Any]) -> tuple[Release, str]:
    """The release every host's `checks.versions` answer names, or the newest modelled and why not.

    `reports` maps each host to its answer ({"vllm": "0.16.0", ...}), or to anything else when it could
    not answer. The reason names the hosts and what they reported (escaped: it comes from the servers)."""
    newest = f"the prediction follows vLLM {release_text(NEWEST_MODELLED)}'s accounting, the newest modelled"
    found: dict[str, Release] = {}
    for host, answer in reports.items():
        text = answer.get("vllm") if isinstance(answer, Mapping) else None
        match = _RELEASE.match(text.strip()) if isinstance(text, str) else None
        if match is None:
            shown = "no vLLM version" if text is None else f"vLLM version '{printable(str(text), 40)}'"
            return NEWEST_MODELLED, f"{printable(host, 80)} reported {shown}: {newest}"
        found[host] = (int(match.group(1)), int(match.group(2)))
    releases = sorted(set(found.values()))
    if not releases:
        return NEWEST_MODELLED, f"no host reported its vLLM version: {newest}"
    if len(releases) > 1:
        listed = ", ".join(f"{printable(h, 80)} {release_text(v)}" for h, v in sorted(found.items()))
        return NEWEST_MODELLED, f"the hosts run different vLLM releases ({listed}): {newest}"
    try:
        accounting_for(releases[0])
    except InputError as exc:
        return NEWEST_MODELLED, f"the hosts run vLLM {release_text(releases[0])} ({exc.problem}): {newest}"
    return releases[0], ""
