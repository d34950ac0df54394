"""How a supervisor reaches an agent: over SSH (connect, bootstrap, exec `attach`) or as a local subprocess.

A connector's `open()` returns an `AgentLink`: a byte stream carrying the protocol plus what was
learned on the way (host key, python, architecture, where the agent lives). The supervisor calls it
again after every drop, so a connector keeps no connection state of its own.

- `SshConnector`: `python3 -I <cache>/agent-<hash>.pyz attach [--socket S] [--simulate SPEC]
  [--prometheus HOST:PORT]` on an exec channel, run through bootstrap.RUN_VERIFIED (it checks the file's
  SHA-256 and owner on the server first); the command line is an argv list joined with shlex.join.
- `LocalConnector`: `sys.executable -I -S -c <run the agent from its folder> attach ...` over pipes, for
  the machine meshdeck runs on and for `meshdeck --demo` (why -I -S: `LocalConnector.argv`).

`attach` starts the agent daemon if none runs for that socket and relays stdin/stdout to it, so a
dropped connection ends only `attach`: the daemon, its ring buffer and its workers keep running.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import meshdeck_agent
from meshdeck_agent.protocol import ATTACH_EXIT_VERSION_CONFLICT, Hello

from meshdeck.core.host_address import parse_listen_address
from meshdeck.core.text import printable
from meshdeck.remote.bootstrap import (
    DEFAULT_CACHE_DIR,
    DEFAULT_PYTHONS,
    RUN_REFUSED_EXIT,
    RUN_REFUSED_MARK,
    AgentPackage,
    bootstrap,
    find_agent_package,
    run_verified_argv,
)
from meshdeck.remote.errors import AgentVersionConflict, BootstrapError, ConnectError, ConnectionLost, ProtocolMismatch
from meshdeck.remote.hostkeys import HostKeyPrompt, HostKeyStore
from meshdeck.remote.read_hub import shared_hub
from meshdeck.remote.rpc import RpcClient
from meshdeck.remote.ssh import SshConnection, SshOptions, connect
from meshdeck.remote.sshconfig import SshRoute
from meshdeck.remote.streams import ByteStream, ChannelStream, PipeStream, attach_outcome

log = logging.getLogger(__name__)

# `python -I -S -c RUN_AGENT_FROM <folder> attach ...` runs the agent package found in <folder>, this app's own.
RUN_AGENT_FROM = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); from meshdeck_agent.__main__ import main; sys.exit(main())"
)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class AgentOptions:
    """Flags for `attach`: which daemon (socket) to reach, and how that daemon runs if attach starts it.

    `interval_s`, `simulate`, `seed`, `state_dir` and `prometheus` apply only when no daemon answers on the
    socket yet (attach then starts one with them); a running daemon keeps its own settings (its hello says
    where its exporter listens; daemon_settings.py compares).
    """

    socket: str | None = None  # default: the agent's own ($XDG_RUNTIME_DIR or ~/.cache/meshdeck)
    state_dir: str | None = None  # default: next to the socket
    simulate: str | None = None  # e.g. "8xH200": a simulated server, labelled simulated everywhere
    seed: int | None = None
    interval_s: float | None = None  # seconds between samples (the agent's default is 1)
    prometheus: str | None = None  # HOST:PORT: the daemon also serves Prometheus metrics there
    start: bool = True  # False: reach a running daemon only (`attach --no-start`), e.g. the one a Slurm job runs

    def __post_init__(self) -> None:
        if self.prometheus is not None:
            parse_listen_address(self.prometheus, "agent.prometheus")

    def attach_args(self) -> list[str]:
        args = ["attach"]
        if self.socket:
            args += ["--socket", self.socket]
        if self.state_dir:
            args += ["--state-dir", self.state_dir]
        if self.simulate:
            args += ["--simulate", self.simulate]
        if self.seed is not None:
            args += ["--seed", str(self.seed)]
        if self.interval_s is not None:
            args += ["--interval", repr(float(self.interval_s))]
        if self.prometheus is not None:
            args += ["--prometheus", self.prometheus]
        if not self.start:
            args.append("--no-start")
        return args


@dataclass
class AgentLink:
    """An open byte stream to an agent, how it was reached, and the options attach was run with (None: a
    link that did not run attach); a daemon that was already running may run otherwise (daemon_settings.py)."""

    stream: ByteStream
    details: dict[str, Any] = field(default_factory=dict)
    _close: Callable[[], None] | None = None
    options: AgentOptions | None = None

    def close(self) -> None:
        try:
            self.stream.close()
        finally:
            if self._close is not None:
                self._close()


def say_hello(client: RpcClient, link: AgentLink, host: str, timeout: float) -> Hello:
    """`client.start()` on a link to `attach`. An attach that exited with ATTACH_EXIT_VERSION_CONFLICT (a
    daemon of another version it could not replace) raises AgentVersionConflict with attach's own line,
    which names both versions; one the server refused to run (RUN_REFUSED_EXIT: the uploaded file changed
    or is not the user's alone) raises BootstrapError "agent_changed" with the server's line; an agent whose
    hello names another version than the one uploaded (link.details["agent_version"]) raises
    ProtocolMismatch (the supervisor uploads it again once). Other failures raise as client.start does."""
    try:
        hello = client.start(timeout)
    except ConnectionLost:
        status, last_line = attach_outcome(link.stream)
        if status == ATTACH_EXIT_VERSION_CONFLICT:
            message = last_line.removeprefix("meshdeck-agent: error: ") or "attach exited: version conflict"
            raise AgentVersionConflict(f"{host}: {message}") from None
        if status == RUN_REFUSED_EXIT or last_line.startswith(RUN_REFUSED_MARK):  # its status may be lost in a close
            message = last_line.removeprefix(RUN_REFUSED_MARK) or "the server refused to run the agent file"
            raise BootstrapError(
                "agent_changed",
                f"{host}: the agent was not started: {message}; check who else can write there, then connect again",
            ) from None
        raise
    uploaded = link.details.get("agent_version")
    if uploaded is not None and hello.agent != uploaded:
        client.close("the agent is not the one uploaded")
        raise ProtocolMismatch(
            f"{host}: the agent answered as {printable(hello.agent, 64)} (protocol {hello.protocol}), but agent "
            f"{uploaded} was uploaded and started"
        )
    return hello


class Connector(Protocol):
    """`open` reaches the agent. A connector that can put the agent on the server again also has
    `reinstall()`: the next `open` then uploads the agent even where one with the same hash is found
    (the supervisor calls it once when the agent answers with another protocol)."""

    def open(self, progress: Progress) -> AgentLink: ...

    def describe(self) -> str: ...


@dataclass
class SshConnector:
    """Reach an agent over SSH; bootstraps (uploads) the agent when the server lacks this version."""

    route: SshRoute
    host_keys: HostKeyStore
    package: AgentPackage | None = None  # None: find_agent_package(agent_pyz) at each connect
    agent_pyz: str | None = None
    options: SshOptions = field(default_factory=SshOptions)
    agent: AgentOptions = field(default_factory=AgentOptions)
    cache_dir: str = DEFAULT_CACHE_DIR
    pythons: Sequence[str] = DEFAULT_PYTHONS
    host_key_prompt: HostKeyPrompt | None = None
    force_upload: bool = False  # set by reinstall(); the next successful bootstrap clears it

    def describe(self) -> str:
        return self.route.describe()

    def reinstall(self) -> None:
        self.force_upload = True

    def attach_argv(self, python: str, agent_path: str, sha256: str) -> list[str]:
        """`python -I` (no user site, no PYTHON* env) running the agent at `agent_path` only if it still
        hashes to `sha256` (bootstrap.RUN_VERIFIED)."""
        return run_verified_argv(python, agent_path, sha256, self.agent.attach_args())

    def open(self, progress: Progress) -> AgentLink:
        if self.package is not None:
            self.package.check_protocol(self.describe())  # a stale local zipapp: no need to reach the server
        progress("connecting")
        conn: SshConnection = connect(self.route, self.host_keys, self.options, self.host_key_prompt)
        try:
            package = self.package or find_agent_package(self.agent_pyz)  # bootstrap checks its protocol
            progress("bootstrapping")
            placed = bootstrap(conn, package, self.cache_dir, self.pythons, progress, force=self.force_upload)
            self.force_upload = False
            argv = self.attach_argv(placed.platform.python, placed.agent_path, package.sha256)
            progress("starting the agent")
            channel = conn.open_exec(argv)
        except BaseException:
            conn.close()
            raise
        details = {
            "host_key": f"{conn.host_key.key_type} {conn.host_key.fingerprint}",
            "auth": conn.auth_method,
            "python": placed.platform.python,
            "python_version": ".".join(map(str, placed.platform.python_version)),
            "machine": placed.platform.machine,
            "agent_path": placed.agent_path,
            "agent_sha256": package.sha256,
            "agent_version": package.agent_version,
            "uploaded": placed.uploaded,
            "route": self.route.describe(),
        }
        return AgentLink(ChannelStream(channel, self.route.target.alias), details, conn.close, self.agent)


@dataclass
class LocalConnector:
    """Run the agent's `attach` as a subprocess of this program (this machine, or `--demo`)."""

    name: str
    agent: AgentOptions = field(default_factory=AgentOptions)
    python: str = sys.executable
    env: dict[str, str] | None = None
    agent_pyz: str | None = None  # used when meshdeck runs as a frozen (PyInstaller) app

    def describe(self) -> str:
        return f"local ({self.agent.simulate or 'this machine'})"

    def argv(self) -> list[str]:
        if getattr(sys, "frozen", False):  # sys.executable is meshdeck itself: run the zipapp on python3
            python = shutil.which("python3")
            if python is None:
                raise BootstrapError("no_python", f"{self.name}: the local agent needs python3 on PATH (>= 3.9)")
            package = find_agent_package(self.agent_pyz)
            package.check_protocol(self.name)
            return [python, "-I", str(package.path), *self.agent.attach_args()]
        # An attach runs for every connection, so its start-up is paid once per host per connect: without `site`
        # (-S) it skips site-packages' .pth files (an editable install's import finder among them), about a
        # quarter of its CPU. It needs only the standard library and the agent's own folder, which it is given;
        # -I keeps PYTHONPATH and the user's site out, as on servers. The daemon it starts runs with site.
        folder = os.path.dirname(os.path.dirname(os.path.abspath(meshdeck_agent.__file__)))
        return [self.python, "-I", "-S", "-c", RUN_AGENT_FROM, folder, *self.agent.attach_args()]

    def open(self, progress: Progress) -> AgentLink:
        progress("connecting")
        argv = self.argv()
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.env if self.env is not None else dict(os.environ),
                start_new_session=True,  # Ctrl-C in the terminal reaches meshdeck, not the agent
            )
        except OSError as exc:
            raise ConnectError(
                f"{self.name}: cannot start the local agent ({argv[0]}): {exc.strerror or exc}"
            ) from None
        details = {"python": self.python, "argv": argv, "pid": process.pid}
        return AgentLink(PipeStream(process, self.name, hub=shared_hub()), details, options=self.agent)


def agent_command(details: dict[str, Any]) -> list[str]:
    """The words that run the agent a link reached, before its subcommand: the uploaded zipapp, run only while it
    hashes as uploaded (SSH), or this app's own agent package (local; with `site`, which a daemon needs). A job on
    a Slurm cluster starts its nodes' agents with it (the zipapp sits in the cluster's shared home)."""
    if details.get("agent_path") and details.get("agent_sha256") and details.get("python"):
        return run_verified_argv(str(details["python"]), str(details["agent_path"]), str(details["agent_sha256"]), [])
    if getattr(sys, "frozen", False):
        python = shutil.which("python3")
        if python is None:
            raise BootstrapError("no_python", "the local agent needs python3 on PATH (>= 3.9)")
        return [python, "-I", str(find_agent_package(None).path)]
    folder = os.path.dirname(os.path.dirname(os.path.abspath(meshdeck_agent.__file__)))
    return [str(details.get("python") or sys.executable), "-I", "-c", RUN_AGENT_FROM, folder]
