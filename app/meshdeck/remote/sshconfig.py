"""Turn what the operator types (`gpu-a`, `ubuntu@10.0.0.5`, `-J bastion`) into a route of SSH hops.

Operators already describe their servers in `~/.ssh/config`; meshdeck reads it with
`paramiko.SSHConfig` (Host patterns, HostName, User, Port, IdentityFile, IdentitiesOnly,
ProxyJump, ProxyCommand, HostKeyAlias, ConnectTimeout, UserKnownHostsFile) so an alias that works
with `ssh` works here. paramiko parses ProxyJump but does not act on it: the route lists the jump
hosts (each resolved through the config again, as OpenSSH does) and `meshdeck.remote.ssh` opens
`direct-tcpip` channels through them. paramiko does not follow `Include`; this module inlines the
included files first (globs, paths relative to ~/.ssh) so split configs work too.

Flags given explicitly (port, identity file, jump) win over the config, like `ssh -p/-i/-J`.
Limitation: `%p`/`%r` inside a ProxyCommand are expanded by paramiko from the config values, not
from a `-p` flag.
"""

from __future__ import annotations

import getpass
import glob
import io
import os
import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path

import paramiko

from meshdeck.core.errors import InputError

DEFAULT_PORT = 22
MAX_JUMP_HOPS = 8
_MAX_INCLUDE_DEPTH = 16
_INCLUDE_LINE = re.compile(r"^\s*include\s*(?:=\s*|\s)(.+)$", re.IGNORECASE)
_HOST_CHARS = re.compile(r"^[A-Za-z0-9._%:\-\[\]]+$")


@dataclass(frozen=True)
class SshEndpoint:
    """One SSH server to log in to, fully resolved."""

    alias: str  # what the operator typed (a config alias or a host name)
    hostname: str
    port: int = DEFAULT_PORT
    user: str = ""
    identity_files: tuple[str, ...] = ()
    identities_only: bool = False
    proxy_command: str | None = None
    host_key_alias: str | None = None
    connect_timeout_s: float | None = None
    user_known_hosts: tuple[str, ...] = ()

    @property
    def known_hosts_name(self) -> str:
        """The name this server's key is filed under: `host`, or `[host]:port` when not on port 22."""
        name = self.host_key_alias or self.hostname
        return name if self.port == DEFAULT_PORT else f"[{name}]:{self.port}"

    @property
    def label(self) -> str:
        return f"{self.user}@{self.hostname}:{self.port}"


@dataclass(frozen=True)
class SshRoute:
    """The jump hosts to go through, in order, then the target."""

    target: SshEndpoint
    jumps: tuple[SshEndpoint, ...] = field(default_factory=tuple)

    @property
    def hops(self) -> tuple[SshEndpoint, ...]:
        return (*self.jumps, self.target)

    def describe(self) -> str:
        return " -> ".join(hop.label for hop in self.hops)


@dataclass(frozen=True)
class TargetSpec:
    """`[user@]host[:port]` or `ssh://[user@]host[:port]` split into parts; None where not given."""

    host: str
    user: str | None = None
    port: int | None = None


def parse_target(text: str, field_name: str = "target") -> TargetSpec:
    """Parse one `[user@]host`, `ssh://[user@]host[:port]` or (for jumps) `[user@]host[:port]`."""
    raw = text.strip()
    if not raw:
        raise InputError(field_name, "is empty; give a host name, an ~/.ssh/config alias or user@host")
    if any(ch.isspace() for ch in raw) or raw.startswith("-"):
        raise InputError(field_name, f"{text!r} is not a host: no spaces, must not start with '-'")
    if raw.startswith("ssh://"):
        raw = raw[len("ssh://") :].rstrip("/")
    user: str | None = None
    if "@" in raw:
        user, _, raw = raw.rpartition("@")
        if not user:
            raise InputError(field_name, f"{text!r} has an empty user before '@'")
    port: int | None = None
    if raw.startswith("["):  # [ipv6] or [ipv6]:port
        close = raw.find("]")
        if close < 0:
            raise InputError(field_name, f"{text!r}: unclosed '[' in an IPv6 address")
        host, rest = raw[1:close], raw[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise InputError(field_name, f"{text!r}: expected ':port' after ']'")
            port = parse_port(rest[1:], field_name)
    elif raw.count(":") == 1:
        host, _, port_text = raw.partition(":")
        port = parse_port(port_text, field_name)
    else:
        host = raw
    if not host or not _HOST_CHARS.match(host):
        raise InputError(field_name, f"{text!r}: {host!r} is not a valid host name or address")
    return TargetSpec(host=host, user=user, port=port)


def parse_port(text: str | int, field_name: str = "port") -> int:
    try:
        port = int(text)
    except (TypeError, ValueError):
        raise InputError(field_name, f"{text!r} is not a port number (1-65535)") from None
    if not 1 <= port <= 65535:
        raise InputError(field_name, f"{port} is out of range (1-65535)")
    return port


def _expand_includes(text: str, base_dir: Path, depth: int = 0) -> str:
    """Inline `Include` directives (paramiko ignores them), relative paths resolved against ~/.ssh."""
    if depth > _MAX_INCLUDE_DEPTH:
        raise InputError("ssh_config", f"Include nested deeper than {_MAX_INCLUDE_DEPTH} levels (a loop?)")
    out: list[str] = []
    for line in text.splitlines():
        match = _INCLUDE_LINE.match(line)
        if not match:
            out.append(line)
            continue
        for pattern in shlex.split(match.group(1)):
            pattern = os.path.expanduser(pattern)
            if not os.path.isabs(pattern):
                pattern = str(base_dir / pattern)
            for path in sorted(glob.glob(pattern)):
                if os.path.isfile(path):
                    included = Path(path).read_text(encoding="utf-8", errors="replace")
                    out.append(_expand_includes(included, base_dir, depth + 1))
    return "\n".join(out)


def load_ssh_config(path: str | os.PathLike[str] | None) -> paramiko.SSHConfig:
    """Parse an ssh_config file; a missing file is an empty config, a broken one names the file."""
    if path is None:
        return paramiko.SSHConfig()
    path = Path(os.path.expanduser(os.fspath(path)))
    if not path.exists():
        return paramiko.SSHConfig()
    try:
        text = _expand_includes(path.read_text(encoding="utf-8", errors="replace"), Path.home() / ".ssh")
        return paramiko.SSHConfig.from_file(io.StringIO(text))
    except paramiko.ssh_exception.ConfigParseError as exc:
        raise InputError(str(path), f"cannot parse ssh config: {exc}") from None


def _endpoint_from_config(config: paramiko.SSHConfig, spec: TargetSpec) -> SshEndpoint:
    options = config.lookup(spec.host)
    port = spec.port if spec.port is not None else parse_port(options.get("port", DEFAULT_PORT), f"{spec.host}: Port")
    user = spec.user or options.get("user") or getpass.getuser()
    timeout = options.get("connecttimeout")
    known = tuple(
        os.path.expanduser(p)
        for p in shlex.split(options.get("userknownhostsfile", ""))
        if p.lower() != "none"  # a literal "none" means no file
    )
    return SshEndpoint(
        alias=spec.host,
        hostname=options.get("hostname", spec.host),
        port=port,
        user=user,
        identity_files=tuple(os.path.expanduser(p) for p in options.get("identityfile", [])),
        identities_only=str(options.get("identitiesonly", "no")).lower() == "yes",
        proxy_command=options.get("proxycommand") or None,
        host_key_alias=options.get("hostkeyalias"),
        connect_timeout_s=float(timeout) if timeout and str(timeout).isdigit() else None,
        user_known_hosts=known,
    )


def _configured_jump(config: paramiko.SSHConfig, host: str) -> str | None:
    value = config.lookup(host).get("proxyjump")
    if not value or value.strip().lower() == "none":
        return None
    return value


def _resolve_jumps(config: paramiko.SSHConfig, jump_text: str, depth: int = 0) -> tuple[SshEndpoint, ...]:
    """Jump hosts in connection order; the first jump host's own ProxyJump is followed first, as OpenSSH does."""
    if depth > MAX_JUMP_HOPS:
        raise InputError("jump", f"ProxyJump nested deeper than {MAX_JUMP_HOPS} hops (a loop in the ssh config?)")
    hops: list[SshEndpoint] = []
    for index, part in enumerate(jump_text.split(",")):
        spec = parse_target(part, "jump")
        inner = _configured_jump(config, spec.host) if index == 0 else None
        if inner:  # only the first hop may itself be reached through jumps
            hops.extend(_resolve_jumps(config, inner, depth + 1))
        hop = _endpoint_from_config(config, spec)
        hops.append(replace(hop, proxy_command=hop.proxy_command if not hops else None))
    if len(hops) > MAX_JUMP_HOPS:
        raise InputError("jump", f"more than {MAX_JUMP_HOPS} jump hosts")
    return tuple(hops)


def resolve_route(
    target: str,
    *,
    port: int | None = None,
    identity_file: str | None = None,
    jump: str | None = None,
    config_path: str | os.PathLike[str] | None = "~/.ssh/config",
) -> SshRoute:
    """Resolve TARGET (an alias, host or user@host) with the ssh config and explicit flags into a route.

    Raises InputError naming the field for a malformed target, port or jump.
    """
    config = load_ssh_config(config_path)
    spec = parse_target(target, "target")
    if port is not None:
        spec = replace(spec, port=parse_port(port, "port"))
    endpoint = _endpoint_from_config(config, spec)
    if identity_file:
        path = os.path.expanduser(identity_file)
        if not os.path.isfile(path):
            raise InputError("identity_file", f"{identity_file}: no such file")
        endpoint = replace(endpoint, identity_files=(path, *endpoint.identity_files))
    jump_text = jump if jump is not None else _configured_jump(config, spec.host)
    if jump_text and jump_text.strip().lower() != "none":
        jumps = _resolve_jumps(config, jump_text)
        if endpoint.proxy_command:  # OpenSSH: whichever comes first wins; we honour ProxyJump
            endpoint = replace(endpoint, proxy_command=None)
        return SshRoute(target=endpoint, jumps=jumps)
    return SshRoute(target=endpoint)
