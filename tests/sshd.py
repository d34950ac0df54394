"""Real OpenSSH servers on 127.0.0.1 for tests: `sshd -D -e -f <temp config>`, one temp dir each.

Other areas import the fixtures from here (`from sshd import sshd, sshd_factory, ssh_client_key`
in their conftest.py; tests/ is on sys.path because tests/conftest.py sits there) or use
`SshdFactory` directly. Each server has its own host key, `StrictModes no`, `UsePAM no`,
`AuthorizedKeysFile` in its temp dir, `PermitRootLogin prohibit-password` when run as root, listens
on a free loopback port and is terminated by PID (its session processes too). Without
/usr/sbin/sshd the fixtures skip with the reason.

A server can be stopped and started again on the same port with the same host key
(`stop()`/`start()`) and its per-connection session processes killed (`kill_sessions()`) — the
tools the connection-drop tests need.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
SFTP_SERVER_CANDIDATES = (
    "/usr/lib/openssh/sftp-server",
    "/usr/libexec/openssh/sftp-server",
    "/usr/libexec/sftp-server",
)
START_TIMEOUT_S = 20.0


def sshd_available() -> bool:
    return os.access(SSHD, os.X_OK) and os.access(SSH_KEYGEN, os.X_OK)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def generate_key(path: Path, key_type: str = "ed25519", passphrase: str = "", comment: str = "meshdeck-test") -> Path:
    """Create an OpenSSH key pair at `path` / `path`.pub with ssh-keygen; returns `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    argv = [SSH_KEYGEN, "-q", "-t", key_type, "-N", passphrase, "-C", comment, "-f", str(path)]
    if key_type == "rsa":
        argv[4:4] = ["-b", "2048"]
    subprocess.run(argv, check=True, capture_output=True, timeout=60)
    return path


@dataclass
class SshdServer:
    """One sshd on 127.0.0.1:port serving the current user, with its own host key."""

    workdir: Path
    port: int
    user: str = field(default_factory=getpass.getuser)
    host: str = "127.0.0.1"
    extra_config: str = ""
    process: subprocess.Popen[bytes] | None = None

    @property
    def config_path(self) -> Path:
        return self.workdir / "sshd_config"

    @property
    def host_key_path(self) -> Path:
        return self.workdir / "ssh_host_ed25519_key"

    @property
    def authorized_keys(self) -> Path:
        return self.workdir / "authorized_keys"

    @property
    def log_path(self) -> Path:
        return self.workdir / "sshd.log"

    @property
    def known_hosts_name(self) -> str:
        return f"[{self.host}]:{self.port}"

    def host_public_key(self) -> str:
        """`ssh-ed25519 AAAA...` of the server's current host key."""
        return " ".join(Path(str(self.host_key_path) + ".pub").read_text().split()[:2])

    def host_fingerprint(self) -> str:
        """SHA256 fingerprint as `ssh-keygen -lf` prints it."""
        out = subprocess.run(
            [SSH_KEYGEN, "-lf", str(self.host_key_path) + ".pub"], check=True, capture_output=True, text=True
        )
        return out.stdout.split()[1]

    def known_hosts_line(self) -> str:
        return f"{self.known_hosts_name} {self.host_public_key()}\n"

    def write_known_hosts(self, path: Path) -> Path:
        """Append this server's key to a known_hosts file (created if missing)."""
        with path.open("a") as out:
            out.write(self.known_hosts_line())
        return path

    def authorize(self, public_key_path: Path) -> None:
        with self.authorized_keys.open("a") as out:
            out.write(Path(public_key_path).read_text().strip() + "\n")

    def regenerate_host_key(self) -> None:
        """Give the server a new host key (takes effect on the next start)."""
        for suffix in ("", ".pub"):
            Path(str(self.host_key_path) + suffix).unlink(missing_ok=True)
        generate_key(self.host_key_path, comment="meshdeck-test-host")

    def _write_config(self) -> None:
        sftp = next((p for p in SFTP_SERVER_CANDIDATES if os.access(p, os.X_OK)), "internal-sftp")
        lines = [
            f"Port {self.port}",
            f"ListenAddress {self.host}",
            f"HostKey {self.host_key_path}",
            f"PidFile {self.workdir / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.authorized_keys}",
            "StrictModes no",
            "UsePAM no",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "AllowTcpForwarding yes",
            "AllowAgentForwarding no",
            "X11Forwarding no",
            "PrintMotd no",
            "UseDNS no",
            "MaxStartups 200",
            "MaxSessions 100",
            "LogLevel VERBOSE",
            f"Subsystem sftp {sftp}",
        ]
        if os.geteuid() == 0:
            lines.append("PermitRootLogin prohibit-password")
        self.config_path.write_text("\n".join(lines) + "\n" + self.extra_config)

    def start(self) -> None:
        """Start (or restart) `sshd -D -e -f config` and wait until the port accepts connections."""
        if self.process is not None and self.process.poll() is None:
            return
        if not self.host_key_path.exists():
            generate_key(self.host_key_path, comment="meshdeck-test-host")
        self.authorized_keys.touch()
        self._write_config()
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            self.process = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        finally:
            log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.process.returncode}: {self.log_path.read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection((self.host, self.port), timeout=1.0):
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"sshd did not listen on {self.host}:{self.port} within {START_TIMEOUT_S} s")

    def session_pids(self) -> list[int]:
        """PIDs of the per-connection sshd processes (children of the listener)."""
        if self.process is None:
            return []
        try:
            return [child.pid for child in psutil.Process(self.process.pid).children(recursive=False)]
        except psutil.NoSuchProcess:
            return []

    def kill_sessions(self, pids: list[int] | None = None) -> list[int]:
        """SIGKILL the per-connection sshd processes (all, or `pids` taken earlier): their clients see a drop."""
        killed = []
        for pid in self.session_pids() if pids is None else pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        return killed

    def stop_listener(self) -> None:
        """Stop accepting connections; sessions already open keep running (like restarting sshd)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def stop(self) -> None:
        """Terminate the listener and every process under it, by PID."""
        children: list[psutil.Process] = []
        if self.process is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                children = psutil.Process(self.process.pid).children(recursive=True)
        self.stop_listener()
        for child in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        psutil.wait_procs(children, timeout=10)


class SshdFactory:
    """Starts servers on demand (each in its own temp dir) and stops them all at the end."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.servers: list[SshdServer] = []

    def start(self, extra_config: str = "", authorize: Path | None = None) -> SshdServer:
        workdir = Path(tempfile.mkdtemp(prefix="sshd-", dir=self.base_dir))
        server = SshdServer(workdir=workdir, port=free_port(), extra_config=extra_config)
        if authorize is not None:
            server.authorized_keys.parent.mkdir(parents=True, exist_ok=True)
            server.authorize(Path(str(authorize) + ".pub"))
        self.servers.append(server)
        server.start()
        return server

    def stop_all(self) -> None:
        for server in self.servers:
            server.stop()
        self.servers.clear()


@pytest.fixture(scope="session")
def sshd_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdFactory]:
    if not sshd_available():
        pytest.skip(f"OpenSSH server not installed ({SSHD} or ssh-keygen missing): apt-get install openssh-server")
    factory = SshdFactory(tmp_path_factory.mktemp("sshd"))
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture(scope="session")
def ssh_client_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A passphrase-less ed25519 client key (`path` and `path`.pub) authorized on `sshd`."""
    if not sshd_available():
        pytest.skip(f"OpenSSH client tools not installed ({SSH_KEYGEN} missing)")
    return generate_key(tmp_path_factory.mktemp("client-key") / "id_ed25519")


@pytest.fixture(scope="session")
def sshd(sshd_factory: SshdFactory, ssh_client_key: Path) -> SshdServer:
    """One shared sshd for the session with `ssh_client_key` authorized."""
    return sshd_factory.start(authorize=ssh_client_key)


@dataclass
class SshAgent:
    """A real `ssh-agent -D -a SOCKET` process; `add(key)` runs ssh-add against it."""

    socket_path: Path
    process: subprocess.Popen[bytes]

    def add(self, key_path: Path) -> None:
        env = {**os.environ, "SSH_AUTH_SOCK": str(self.socket_path)}
        ssh_add = shutil.which("ssh-add") or "/usr/bin/ssh-add"
        subprocess.run([ssh_add, "-q", str(key_path)], check=True, capture_output=True, env=env, timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@pytest.fixture
def ssh_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SshAgent]:
    """A private ssh-agent for one test, with SSH_AUTH_SOCK pointing at it (no keys until `add`)."""
    binary = shutil.which("ssh-agent")
    if binary is None:
        pytest.skip("ssh-agent not installed (apt-get install openssh-client)")
    socket_path = Path(tempfile.mkdtemp(prefix="agent-", dir="/tmp")) / "agent.sock"  # short: sun_path limit
    process = subprocess.Popen(
        [binary, "-D", "-a", str(socket_path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while not socket_path.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"ssh-agent did not start: {process.stderr.read().decode() if process.stderr else ''}")
        time.sleep(0.02)
    monkeypatch.setenv("SSH_AUTH_SOCK", str(socket_path))
    agent = SshAgent(socket_path, process)
    try:
        yield agent
    finally:
        agent.stop()
        if process.stderr:
            process.stderr.close()
        shutil.rmtree(socket_path.parent, ignore_errors=True)
