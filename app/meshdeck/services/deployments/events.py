"""What the deployment registry tells its subscribers (the console's bridge): typed change events.

    unsubscribe = deploy.subscribe(bridge.post)      # called on whichever thread made the change

`DeploymentChanged` carries a deployment's whole new snapshot, so a newer one supersedes an older one
that has not been delivered yet; `DeploymentLogLines` carries new text of a log being watched (escaped,
newlines kept), which a later event extends. A consumer that falls behind therefore keeps one pending
event per `key` (`merged_after` combines two): what waits is bounded by the deployments and the logs
watched, never by how fast they change.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from meshdeck.services.deployments.model import DeploymentSnapshot

MAX_PENDING_LOG_CHARS = 256 * 1024  # text of one watched log waiting for a slow consumer; older text is cut


@dataclass(frozen=True)
class DeploymentChanged:
    """A deployment appeared or changed (state, a part's state, measured numbers)."""

    snapshot: DeploymentSnapshot

    @property
    def key(self) -> tuple[str, str]:
        return ("deployment", self.snapshot.id)

    def merged_after(self, older: object) -> DeploymentChanged:
        """The event that stands for both: this newer snapshot."""
        return self


@dataclass(frozen=True)
class DeploymentLogLines:
    """New text of a watched part's log. `reset`: `text` is the log's tail and replaces what was shown;
    otherwise it follows what was delivered before."""

    deployment_id: str
    command: str
    text: str
    reset: bool = False

    @property
    def key(self) -> tuple[str, str, str]:
        return ("log", self.deployment_id, self.command)

    def merged_after(self, older: object) -> DeploymentLogLines:
        """The event that stands for both: the older text, then this one (a reset replaces it)."""
        if self.reset or not isinstance(older, DeploymentLogLines):
            return self
        text = older.text + self.text
        if len(text) > MAX_PENDING_LOG_CHARS:  # what is cut was never shown: start over from the newest text
            return replace(self, text=text[-MAX_PENDING_LOG_CHARS:], reset=True)
        return replace(self, text=text, reset=older.reset)


DeploymentEvent = DeploymentChanged | DeploymentLogLines
