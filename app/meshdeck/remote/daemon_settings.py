"""Whether the agent that answered runs as this host's settings ask. A running daemon keeps its own settings.

`attach` passes `--prometheus HOST:PORT` (like `--simulate` and `--interval`) only to a daemon it starts;
one already serving the socket (started earlier without it, by another console, by `hosts probe`, by
hand, or before the host's setting changed) keeps the settings it was started with until it restarts.
Its hello says where its Prometheus exporter listens (`daemon`, protocol "Daemon settings");
`exporter_note` compares that with the address this host asks for and says in one line what differs and
what to do, for the host's reason. "" when they agree. What the agent sent is escaped here: it is shown.
"""

from __future__ import annotations

from meshdeck_agent.protocol import Hello

from meshdeck.core.text import printable

_KEEPS = (
    "the agent was already running, {started}, and a running agent keeps its own settings; "
    "restart the agent to apply this host's (its workers keep running)"
)


def exporter_note(asked: str | None, hello: Hello) -> str:
    """One line when the agent's exporter is not what `asked` (HOST:PORT, or None for none) says; else ""."""
    daemon = hello.daemon
    if daemon is None:  # an agent from before the report
        if asked is None:
            return ""
        return (
            f"Prometheus exporter asked on {asked}: agent {printable(hello.agent, 64)} does not say whether it runs one"
        )
    if daemon.prometheus_error is not None:
        return f"Prometheus exporter not running: {printable(daemon.prometheus_error, 300)}"
    running = None if daemon.prometheus is None else printable(daemon.prometheus, 300)
    if running == asked:
        return ""
    if running is None:
        return f"Prometheus exporter off, not on {asked}: " + _KEEPS.format(started="started without one")
    if asked is None:
        return f"Prometheus exporter on {running}, which this host's settings do not ask for: " + _KEEPS.format(
            started="started with it"
        )
    return f"Prometheus exporter on {running}, not on {asked}: " + _KEEPS.format(started="started with that address")
