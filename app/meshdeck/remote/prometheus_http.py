"""One request to a Prometheus server's HTTP API, bounded in time and size, credentials kept out of sight.

The operator's Prometheus is a server outside meshdeck: what it sends, and how slowly, is input. So:

- A request has one deadline, from connecting to the reply's last byte (`timeout_s`): a timer shuts the
  socket down when it passes, so a server that drips a byte every few seconds (which never trips a
  per-read timeout) is cut off on time. The name lookup is the resolver's own (it cannot be interrupted).
- A reply is read up to `max_bytes` (a `Content-Length` over it is refused before reading).
- A redirect is refused, not followed: it names where it pointed, and credentials never go elsewhere.
- `http://user:password@host:9090` sends HTTP basic auth (user and password percent-decoded); every
  message names the server as `ServerURL.shown`, with the password replaced by `***`.

Every error is a `PrometheusError` naming the (shown) URL asked and the step or field that failed.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import re
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

from meshdeck.core.errors import InputError
from meshdeck.core.text import printable

ERROR_BODY_BYTES = 64 << 10  # of a refusal's body: Prometheus says why in a short JSON object
READ_CHUNK_BYTES = 64 << 10
REDACTED = "***"
_USERINFO = re.compile(r"(?<=//)([^/@]*?):[^/@]*@")  # the password of any user:password@ in a text


class PrometheusError(InputError):
    """A Prometheus server could not be asked, or answered something this client cannot use: input from
    outside, reported as the CLI and the console report any (one line, exit status 2).

    `str(error)` names the URL asked (its password hidden) and the field (or the HTTP step) that was wrong."""

    def __init__(self, url: str, field: str, problem: str) -> None:
        self.url = url
        self.reply_field = field
        super().__init__(f"Prometheus at {url}: {field}", problem)


def redact(text: str) -> str:
    """`text` with the password of every `scheme://user:password@` in it replaced by ***."""
    return _USERINFO.sub(rf"\1:{REDACTED}@", text)


@dataclass(frozen=True)
class ServerURL:
    """A Prometheus server's base URL, parsed once: where requests go (`scheme://host:port/prefix`) and the
    basic-auth credentials its userinfo gave. `shown` is what messages name; the password is never shown."""

    scheme: str
    host: str
    port: int | None  # None: the scheme's (80, 443)
    prefix: str  # a path prefix such as /prometheus, without the trailing slash ("" for none)
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) to connect to."""
        return self.host, self.port if self.port is not None else (443 if self.scheme == "https" else 80)

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"

    @property
    def shown(self) -> str:
        userinfo = ""
        if self.username is not None:
            name = urllib.parse.quote(self.username, safe="")
            userinfo = f"{name}:{REDACTED}@" if self.password is not None else f"{name}@"
        return f"{self.scheme}://{userinfo}{self.netloc}{self.prefix}"

    def authorization(self) -> str | None:
        """The `Authorization` header of HTTP basic auth, when the URL named a user."""
        if self.username is None:
            return None
        pair = f"{self.username}:{self.password or ''}".encode()
        return "Basic " + base64.b64encode(pair).decode("ascii")


def parse_server_url(text: str, *, field: str = "prometheus_url") -> ServerURL:
    """`http://host:9090` (a path prefix such as `/prometheus` kept; `user:password@` for basic auth; no query,
    no fragment) or an InputError naming `field` (that never shows the password)."""
    value = text.strip()
    shown = printable(redact(value), 200)
    if not all(c.isprintable() and not c.isspace() for c in value):
        raise InputError(field, f"'{shown}': a URL holds no spaces or control characters")
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port
    except ValueError as exc:  # a port out of range, a malformed [IPv6] address
        raise InputError(field, f"'{shown}': {printable(redact(str(exc)), 200)}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(field, f"'{shown}' is not an http(s) URL of a Prometheus server (e.g. http://localhost:9090)")
    if parts.query or parts.fragment:
        raise InputError(field, f"'{shown}': give the server's base URL, without ?query or #fragment")
    return ServerURL(
        scheme=parts.scheme,
        host=parts.hostname,
        port=port,
        prefix=parts.path.rstrip("/"),
        username=None if parts.username is None else urllib.parse.unquote(parts.username),
        password=None if parts.password is None else urllib.parse.unquote(parts.password),
    )


class _Deadline:
    """A request's deadline: `left()` seconds remain; when it passes, the socket being watched is shut down, so
    whatever read, write or handshake is blocked on it returns at once."""

    def __init__(self, seconds: float) -> None:
        self._end = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._ended = False
        self.expired = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.name = "meshdeck-prometheus-deadline"
        self._timer.daemon = True
        self._timer.start()

    def left(self) -> float:
        return self._end - time.monotonic()

    def watch(self, sock: socket.socket | None) -> None:
        """Shut `sock` down when the deadline passes (at once if it has); None: watch nothing."""
        with self._lock:
            self._socket = sock
            if sock is not None and self.expired:
                self._shut(sock)

    def _expire(self) -> None:
        with self._lock:
            if self._ended:
                return
            self.expired = True
            if self._socket is not None:
                self._shut(self._socket)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):  # the plain socket's shutdown: an SSL socket's would touch its state
            socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def end(self) -> None:
        """Stop watching (before the socket is closed: its descriptor may be reused at once)."""
        with self._lock:
            self._ended = True
            self._socket = None
        self._timer.cancel()


def _connect(server: ServerURL, deadline: _Deadline) -> socket.socket:
    """A connected socket (TLS for https, the certificate checked), each step bounded by the deadline."""
    error: OSError | None = None
    for family, kind, proto, _name, address in socket.getaddrinfo(*server.address, type=socket.SOCK_STREAM):
        left = deadline.left()
        if left <= 0 or deadline.expired:
            break
        sock = socket.socket(family, kind, proto)
        deadline.watch(sock)
        try:
            sock.settimeout(left)
            sock.connect(address)
        except OSError as exc:
            deadline.watch(None)
            sock.close()
            error = exc
            continue
        if server.scheme != "https":
            return sock
        wrapped = ssl.create_default_context().wrap_socket(
            sock, server_hostname=server.host, do_handshake_on_connect=False
        )
        deadline.watch(wrapped)
        try:
            wrapped.settimeout(max(0.001, deadline.left()))
            wrapped.do_handshake()
        except OSError:
            deadline.watch(None)
            wrapped.close()
            raise
        return wrapped
    if error is not None:
        raise error
    raise TimeoutError("timed out")


@dataclass(frozen=True)
class _Reply:
    status: int
    body: bytes  # at most the bound + 1 bytes: one more says it is longer
    location: str | None = None  # a redirect's target
    announced_too_long: bool = False  # its Content-Length was over the bound: nothing was read


def post_form(
    server: ServerURL,
    path: str,
    params: list[tuple[str, str]],
    *,
    timeout_s: float,
    max_bytes: int,
    what: str,
) -> bytes:
    """The body of a 200 reply to a form POST of `params` to `path` (under the server's prefix); a
    PrometheusError for anything else. `what` (e.g. "query_range 'up'") is named by the bounds' errors."""
    url = server.shown + path
    deadline = _Deadline(timeout_s)
    try:
        reply = _exchange(server, path, params, deadline, max_bytes)
    except (OSError, http.client.HTTPException, UnicodeError) as exc:
        if deadline.expired:
            raise _late(url, timeout_s, what) from None
        reason = printable(redact(str(exc) or type(exc).__name__), 300)
        raise PrometheusError(url, "connection", f"{reason} (the request's deadline: {timeout_s:g} s)") from None
    finally:
        deadline.end()
    if deadline.expired:  # the shut-down socket read as the reply's end: it is cut short
        raise _late(url, timeout_s, what)
    if reply.status == 200:
        if reply.announced_too_long or len(reply.body) > max_bytes:
            raise PrometheusError(
                url,
                "response",
                f"longer than {max_bytes} bytes (the bound on one reply) for {what}: "
                "ask for a shorter range or fewer series",
            )
        return reply.body
    if 300 <= reply.status < 400:
        where = printable(redact(reply.location or "nowhere"), 200)
        raise PrometheusError(
            url,
            f"HTTP {reply.status}",
            f"redirected to {where}; meshdeck does not follow redirects (credentials stay with the server "
            "named): give the URL Prometheus answers at",
        )
    # Prometheus answers 400 / 422 / 503 with its JSON error body: say what it said.
    raise PrometheusError(
        url, f"HTTP {reply.status}", error_text(reply.body) or http.client.responses.get(reply.status, "error")
    )


def _late(url: str, timeout_s: float, what: str) -> PrometheusError:
    return PrometheusError(
        url,
        "deadline",
        f"no complete reply to {what} within {timeout_s:g} s (the whole request, connect to last byte): "
        "a slow or stalled server; ask for less or allow more time",
    )


def _exchange(
    server: ServerURL, path: str, params: list[tuple[str, str]], deadline: _Deadline, max_bytes: int
) -> _Reply:
    connection = http.client.HTTPConnection(*server.address, timeout=max(0.001, deadline.left()))
    try:
        connection.sock = _connect(server, deadline)
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json",
            "Accept-Encoding": "identity",
            "Connection": "close",
        }
        authorization = server.authorization()
        if authorization is not None:
            headers["Authorization"] = authorization
        body = urllib.parse.urlencode(params).encode()
        connection.request("POST", server.prefix + path, body=body, headers=headers)
        response = connection.getresponse()
        if response.status != 200:
            return _Reply(response.status, _read(response, ERROR_BODY_BYTES), response.getheader("Location"))
        if response.length is not None and response.length > max_bytes:
            return _Reply(200, b"", announced_too_long=True)
        return _Reply(200, _read(response, max_bytes + 1))
    finally:
        deadline.watch(None)  # before the socket is closed: its descriptor may be reused at once
        connection.close()


def _read(response: http.client.HTTPResponse, limit: int) -> bytes:
    """Up to `limit` bytes of the body, read in chunks; IncompleteRead when it ends before its length."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = response.read(min(READ_CHUNK_BYTES, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size < limit and response.length:  # the connection ended before the Content-Length it announced
        raise http.client.IncompleteRead(b"".join(chunks), response.length)
    return b"".join(chunks)


def error_text(raw: bytes) -> str:
    """What a Prometheus error body says (`errorType: error`), or the start of a body that is no such JSON;
    escaped and bounded, as everything a server says is before it is shown."""
    try:
        payload = json.loads(raw)
    except (ValueError, RecursionError):
        return printable(raw.decode("utf-8", "replace"), 300)
    return said(payload)


def said(payload: object) -> str:
    """The `errorType: error` of a decoded Prometheus reply ("" when it holds none), escaped and bounded."""
    if isinstance(payload, dict) and isinstance(payload.get("error"), str):
        kind = payload.get("errorType")
        return printable(f"{kind if isinstance(kind, str) else 'error'}: {payload['error']}", 300)
    return ""
