"""Pre-flight belongs to the launch, whoever starts it (DESIGN.md §6): `DeployService.launch_profile` runs
the checks before anything starts, for the console's Launch and `meshdeck launch` alike. A failed check
blocks the launch (`PreflightBlocked`: nothing was started) unless the operator overrides it explicitly —
the console's "Launch anyway…" after a confirmation that lists the failed checks, the CLI's `--force` —
and the deployment's events keep the report and who overrode it (or who skipped it: `--skip-preflight`):

    preflight_passed      every check passed                          data: {"passed", "results", "by"}
    preflight_overridden  launched although checks failed; by whom     data: the same, "by" says who
    preflight_skipped     launched without running the checks; by whom data: {"by"}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from meshdeck.launch.preflight_rules import PreflightReport

FORCE_CLI = "meshdeck launch --force"
SKIP_CLI = "meshdeck launch --skip-preflight"
FORCE_CONSOLE = "console: Launch anyway (confirmed by the operator)"


def failure_lines(report: PreflightReport) -> list[str]:
    """`GPU memory on demo-a: …` for every failed check, in the report's order."""
    return [f"{r.check} on {r.host or 'the cluster'}: {r.reason}" for r in report.failures]


def report_summary(report: PreflightReport) -> str:
    """`7 passed, 2 failed`."""
    failed = len(report.failures)
    return f"{len(report.results) - failed} passed, {failed} failed"


@dataclass(frozen=True)
class PreflightVerdict:
    """What a launch went ahead with: the report it ran (None: skipped) and who chose to go on past a
    failed report, or to skip it (`by`; empty when every check passed)."""

    report: PreflightReport | None
    by: str = ""

    @property
    def overridden(self) -> bool:
        return self.report is not None and not self.report.passed

    def event(self) -> tuple[str, str, dict[str, Any]]:
        """(kind, message, data) of the deployment event that records it."""
        if self.report is None:
            return "preflight_skipped", f"launched without pre-flight checks ({self.by})", {"by": self.by}
        data = {**self.report.as_dict(), "by": self.by or None}
        if self.report.passed:
            return "preflight_passed", f"pre-flight: {report_summary(self.report)}", data
        failed = "; ".join(failure_lines(self.report))
        return "preflight_overridden", f"launched although pre-flight failed ({self.by}): {failed}", data


class PreflightBlocked(Exception):
    """Pre-flight failed and nobody overrode it: nothing was started. `report` has every check."""

    def __init__(self, deployment_id: str, report: PreflightReport) -> None:
        super().__init__(
            f"{deployment_id}: pre-flight failed ({report_summary(report)}); nothing was started: "
            + "; ".join(failure_lines(report))
        )
        self.deployment_id = deployment_id
        self.report = report


class LaunchCancelled(Exception):
    """The launch was cancelled during its pre-flight: nothing was started."""
