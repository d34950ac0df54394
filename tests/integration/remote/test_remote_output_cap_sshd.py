"""Remote output the app reads is capped, over a real sshd: a command (or a bootstrap probe) that prints far
more than the cap is stopped once the cap is passed, with one error naming the host and the command, and
the app's memory stays within a small multiple of the cap (tracemalloc peak, measured as a ratio to it)."""

from __future__ import annotations

import tracemalloc
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from meshdeck.remote import ssh
from meshdeck.remote.bootstrap import AgentPackage, bootstrap
from meshdeck.remote.errors import BootstrapError, RemoteOutputTooLarge
from meshdeck.remote.ssh import SshConnection, connect
from meshdeck.remote.sshconfig import resolve_route
from meshdeck_agent import __version__ as AGENT_VERSION
from meshdeck_agent.protocol import PROTOCOL_VERSION
from sshd import SshdServer

pytestmark = pytest.mark.sshd

FLOOD_BYTES = 64 * 1024 * 1024  # 64 x the default cap; the red-team run used 200 MB
# The cap, plus what paramiko may hold in its channel buffer before we read it (one 2 MiB SSH window),
# plus the odd packet: far below the flood, which an unbounded reader keeps whole.
PEAK_LIMIT_IN_CAPS = 4


@pytest.fixture
def conn(sshd: SshdServer, ssh_client_key: Path, trusting_store, no_agent_options) -> Iterator[SshConnection]:
    route = resolve_route("127.0.0.1", port=sshd.port, identity_file=str(ssh_client_key), config_path=None)
    with connect(route, trusting_store, no_agent_options) as connection:
        yield connection


def _peak_while(action: Callable[[], Any]) -> tuple[BaseException | None, int]:
    """What `action` raised (None if it returned) and the peak of Python allocations meanwhile."""
    tracemalloc.start()
    try:
        action()
    except Exception as exc:
        return exc, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return None, 0


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_command_printing_far_more_than_the_cap_is_stopped_with_memory_bounded(conn: SshConnection, stream: str):
    redirect = " >&2" if stream == "stderr" else ""
    argv = ["sh", "-c", f"head -c {FLOOD_BYTES} /dev/zero{redirect}"]
    raised, peak = _peak_while(lambda: conn.run(argv, timeout=120))
    assert isinstance(raised, RemoteOutputTooLarge), f"no error after {FLOOD_BYTES} bytes: {raised!r}"
    message = str(raised)
    assert "127.0.0.1" in message and "head -c" in message and stream in message
    assert peak < PEAK_LIMIT_IN_CAPS * ssh.MAX_OUTPUT_BYTES, f"peak {peak / ssh.MAX_OUTPUT_BYTES:.1f} x the cap"
    assert conn.run(["echo", "still usable"]).stdout == b"still usable\n"  # only that channel was closed


def test_output_up_to_the_cap_is_returned_whole(conn: SshConnection):
    ran = conn.run(["sh", "-c", "head -c 3000 /dev/zero; head -c 2000 /dev/zero >&2"], max_output_bytes=3000)
    assert (len(ran.stdout), len(ran.stderr), ran.exit_status) == (3000, 2000, 0)


def test_a_bootstrap_probe_that_floods_fails_naming_the_host_with_memory_bounded(conn: SshConnection, tmp_path: Path):
    python = tmp_path / "flooding-python"  # answers the version check like python 3.11, then floods as the probe
    python.write_text(
        "#!/bin/sh\n"
        'case "$2" in *%d.%d.%d*) echo 3.11.4; exit 0 ;; esac\n'
        f"head -c {FLOOD_BYTES} /dev/zero | tr '\\000' x\n"
    )
    python.chmod(0o755)
    with zipfile.ZipFile(tmp_path / "agent.pyz", "w") as archive:
        archive.writestr("__main__.py", "print('agent')\n")
        archive.writestr("meshdeck_agent/__init__.py", f'__version__ = "{AGENT_VERSION}"\n')
        archive.writestr("meshdeck_agent/handshake.py", f"PROTOCOL_VERSION = {PROTOCOL_VERSION}\n")
    package = AgentPackage.from_path(tmp_path / "agent.pyz")
    raised, peak = _peak_while(lambda: bootstrap(conn, package, cache_dir=str(tmp_path / "c"), pythons=[str(python)]))
    assert isinstance(raised, BootstrapError) and raised.reason == "probe_failed", repr(raised)
    assert "127.0.0.1" in str(raised) and "bootstrap probe" in str(raised) and "more than" in str(raised)
    assert peak < PEAK_LIMIT_IN_CAPS * ssh.MAX_OUTPUT_BYTES, f"peak {peak / ssh.MAX_OUTPUT_BYTES:.1f} x the cap"
