"""The deployment registry's one background thread: hosts to survey again, and the logs being watched.

    asks = BackgroundAsks(survey=registry.survey, call=call, publish=publish)
    asks.survey_soon(["gpu-a"])                       # a host (re)connected: what runs there now
    unwatch = asks.watch(LogWatch("dep", "vllm-node0", "gpu-a", "dep.vllm-node0", lines=400))
    asks.close()

Nothing runs unless asked: a console whose log tab is hidden watches no log and makes no call. The
thread starts on the first request and ends at `close`. An agent pushes no raw log lines (only the ones
it parses), so a watched log is first read as a tail (`waits.read_tail`), then from where the last
read ended (`workers.logs {id, offset}`) every `interval_s`, at most one window of TAIL_WINDOW_BYTES per
watch and poll: what waits is bounded, and a chatty worker is shown a poll behind rather than read
without end. New text goes out as `DeploymentLogLines`, escaped (newlines and tabs kept). Requests are
worked through in order on this one thread (a survey asks its hosts in parallel); calls have short
timeouts, so `close` waits for at most about one of them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from meshdeck_agent.protocol import LogChunk, ProtocolError

from meshdeck.core.text import printable, printable_lines
from meshdeck.services.deployments.events import DeploymentLogLines
from meshdeck.services.deployments.waits import TAIL_WINDOW_BYTES, read_tail

log = logging.getLogger(__name__)

LOG_POLL_S = 1.0
CALL_TIMEOUT_S = 10.0
CLOSE_WAIT_S = CALL_TIMEOUT_S + 5.0


@dataclass
class LogWatch:
    """One part's log followed for a viewer. `follow=False`: its tail is read once, then the watch ends."""

    deployment_id: str
    command: str
    host: str
    worker_id: str
    lines: int
    follow: bool = True
    offset: int | None = None  # where the next read starts; None: read the tail first
    due: float = 0.0  # monotonic time of the next read


def shown_log(text: str) -> str:
    """New log text as a viewer shows it: a line ends where `str.splitlines` ends it (a CR, a CR LF, ...), as
    in a tail, and with a newline; every other control character is escaped."""
    lines = []
    for line in text.splitlines(keepends=True):
        body = line.splitlines()[0]
        lines.append(body + "\n" if body != line else line)
    return printable_lines("".join(lines))


class BackgroundAsks:
    def __init__(
        self,
        *,
        survey: Callable[[list[str]], Any],
        call: Callable[[str, str, dict[str, Any], float], Any],
        publish: Callable[[DeploymentLogLines], None],
        interval_s: float = LOG_POLL_S,
    ) -> None:
        self._survey = survey
        self._call = call
        self._publish = publish
        self._interval = interval_s
        self._condition = threading.Condition()
        self._hosts: dict[str, None] = {}  # to survey, in the order asked
        self._watches: list[LogWatch] = []
        self._thread: threading.Thread | None = None
        self._closed = False

    def survey_soon(self, hosts: Iterable[str]) -> None:
        with self._condition:
            self._hosts.update(dict.fromkeys(hosts))
            self._wake()

    def watch(self, watch: LogWatch) -> Callable[[], None]:
        """Read `watch`'s log now, and (follow) its new text from then on; returns the function that ends it."""
        with self._condition:
            self._watches.append(watch)
            self._wake()

        def unwatch() -> None:
            with self._condition:
                if watch in self._watches:
                    self._watches.remove(watch)

        return unwatch

    def watched(self) -> list[tuple[str, str]]:
        """(deployment, command) of every log watched now."""
        with self._condition:
            return [(w.deployment_id, w.command) for w in self._watches]

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._condition.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(CLOSE_WAIT_S)

    # -- the thread --------------------------------------------------------------------------------

    def _wake(self) -> None:
        """Under the condition: start the thread if needed, else tell it there is work."""
        if self._closed:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="deploy-background", daemon=True)
            self._thread.start()
        self._condition.notify_all()

    def _next(self) -> tuple[list[str], list[LogWatch]] | None:
        """Wait for work: hosts to survey and the watches due now; None once closed."""
        with self._condition:
            while not self._closed:
                now = time.monotonic()
                due = [w for w in self._watches if w.due <= now]
                if self._hosts or due:
                    hosts, self._hosts = list(self._hosts), {}
                    for watch in due:
                        watch.due = now + self._interval
                        if not watch.follow:
                            self._watches.remove(watch)
                    return hosts, due
                wait = min((w.due for w in self._watches), default=None)
                self._condition.wait(None if wait is None else max(0.0, wait - now))
            return None

    def _run(self) -> None:
        while (work := self._next()) is not None:
            hosts, due = work
            if hosts:
                try:
                    self._survey(hosts)
                except Exception:
                    log.exception("surveying %s failed", ", ".join(hosts))
            for watch in due:
                self._read(watch)

    def _read(self, watch: LogWatch) -> None:
        try:
            if watch.offset is None:
                tail = read_tail(
                    lambda host, method, params: self._call(host, method, params, CALL_TIMEOUT_S),
                    watch.host,
                    watch.worker_id,
                    watch.lines,
                )
                watch.offset = tail.end
                text = shown_log(tail.text + ("\n" if tail.text and tail.ends_line else ""))
                self._publish(DeploymentLogLines(watch.deployment_id, watch.command, text, reset=True))
                return
            params = {"id": watch.worker_id, "offset": watch.offset, "limit": TAIL_WINDOW_BYTES}
            chunk = LogChunk.from_wire(self._call(watch.host, "workers.logs", params, CALL_TIMEOUT_S))
        except Exception as exc:  # an agent hiccup: say so once when nothing was shown yet, else try again
            why = exc.message if isinstance(exc, ProtocolError) else f"{type(exc).__name__}: {exc}"
            log.debug("reading the log of %s on %s: %s", watch.worker_id, watch.host, why)
            if watch.offset is None:
                text = f"meshdeck: cannot read the log of {watch.command} on {watch.host}: {printable(why, 300)}"
                self._publish(DeploymentLogLines(watch.deployment_id, watch.command, text, reset=True))
            return
        if chunk.size is not None and chunk.size < watch.offset:  # a new log (the worker was restarted)
            watch.offset = None
            watch.due = 0.0
            return
        watch.offset = chunk.offset
        if chunk.data:
            self._publish(DeploymentLogLines(watch.deployment_id, watch.command, shown_log(chunk.data)))
