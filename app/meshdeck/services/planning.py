"""Plan with the best speed model this machine has: measured kernel tables where they reach, else the roofline.

The CLI's `plan` and the console's planner both come here, so they rank the same layouts by the same numbers.
"""

from __future__ import annotations

from meshdeck.core.plan_request import PlanRequest
from meshdeck.core.planner import PlanResult, plan
from meshdeck.core.serving import PlanProgress, no_progress
from meshdeck.speed.kernels import import_library, kernel_speed_for

ROOFLINE_CHOSEN = "the roofline was asked for (--speed roofline)"


def plan_with_speed(request: PlanRequest, speed: str = "kernels", progress: PlanProgress = no_progress) -> PlanResult:
    """`speed`: "kernels" (measured tables where they reach this GPU, model and release) or "roofline"."""
    if request.mode != "serve" or speed == "roofline":
        return plan(request, roofline_reason=ROOFLINE_CHOSEN if speed == "roofline" else "", progress=progress)
    kernels = kernel_speed_for(request)
    if isinstance(kernels, str):
        return plan(request, roofline_reason=kernels, progress=progress)
    return plan(request, kernels, progress=progress)


def warm_up_speed_tables() -> str | None:
    """Import the kernel library ahead of the first plan (the console does it in a job at start); its reason
    when it cannot be used here, None when it can."""
    return import_library()
