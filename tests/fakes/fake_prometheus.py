"""A loopback HTTP server that answers Prometheus API requests with recorded replies (tests/fixtures/prometheus/).

The reply to each request comes from `answer(path, params)` -> (HTTP status, body bytes) or (status, body,
extra headers such as Location): a test routes a query to the file Prometheus 2.42 really gave for it.
Every request is kept (path and form fields, POST body or query string; its headers in `headers`) so a
test can check what was asked: the query, the range, the step, the credentials.

A hostile or stalled server: `stall` never answers; with `drip_s` set, the whole reply (status line,
headers, body) goes out one byte every `drip_s` seconds, and `sent` counts the bytes written.
"""

from __future__ import annotations

import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "prometheus"

Answer = Callable[[str, dict[str, list[str]]], tuple[int, bytes] | tuple[int, bytes, dict[str, str]]]


def recorded(name: str) -> bytes:
    """A recorded reply body, byte for byte."""
    return (FIXTURES / name).read_bytes()


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up mid-reply (the size-cap and timeout tests do) is expected, not an error to print."""

    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class FakePrometheus:
    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self.headers: list[dict[str, str]] = []
        self.release = threading.Event()  # a `stall` answer waits on it, a drip stops at it
        self.drip_s: float | None = None
        self.sent = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, params: dict[str, list[str]]) -> None:
                path = urllib.parse.urlsplit(self.path).path
                fake.requests.append((path, params))
                fake.headers.append(dict(self.headers.items()))
                status, body, *more = fake.answer(path, params)
                extra = more[0] if more else {}
                head = [f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}"]
                head += ["Content-Type: application/json", f"Content-Length: {len(body)}", "Connection: close"]
                head += [f"{name}: {value}" for name, value in extra.items()]
                self.close_connection = True
                fake.sent = 0
                reply = ("\r\n".join(head) + "\r\n\r\n").encode() + body
                if fake.drip_s is None:
                    self.wfile.write(reply)
                    fake.sent = len(reply)
                    return
                for index in range(len(reply)):
                    if fake.release.wait(fake.drip_s):
                        return
                    self.wfile.write(reply[index : index + 1])
                    self.wfile.flush()
                    fake.sent += 1

            def do_GET(self) -> None:
                self._reply(urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                self._reply(urllib.parse.parse_qs(self.rfile.read(length).decode()))

            def log_message(self, *_args: object) -> None:
                pass

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stall(self, _path: str, _params: dict[str, list[str]]) -> tuple[int, bytes]:
        """An answer that never comes before the test releases it (a hung server)."""
        self.release.wait(30)
        return 503, b""


@contextmanager
def fake_prometheus(answer: Answer) -> Iterator[FakePrometheus]:
    fake = FakePrometheus(answer)
    thread = threading.Thread(target=fake.server.serve_forever, name="fake-prometheus", daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.release.set()
        fake.server.shutdown()
        fake.server.server_close()
        thread.join(10)
