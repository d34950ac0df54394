"""The wire protocol between meshdeck and its agents: NDJSON over any byte stream.

One JSON object per line, UTF-8, at most MAX_LINE_BYTES per line (newline included).

    hello         {"hello": {"protocol": 1, "agent": "0.2.0"}}            first line, both ways
                  (the agent's also has "epoch": "<sample sequence epoch>", see below, and
                  "daemon": {"prometheus": "127.0.0.1:9400" | null, "prometheus_error"?: "..."}, see below)
    request       {"id": 7, "method": "workers.start", "params": {...}}
    response      {"id": 7, "result": {...}}
    error reply   {"id": 7, "error": {"code": "bad_params", "message": "..."}}
    event         {"event": "samples", "data": {...}}                     no id

A peer whose protocol major differs is refused (`VersionMismatch` names both versions).
Malformed input is answered with an error reply (id null when none could be read); it never
ends the session. The app imports this module; it must stay stdlib-only and run on Python 3.9.

Samples (`samples` event data is {"samples": [SAMPLE, ...], "dropped": N}; `samples.read` returns
{"samples": [...], "dropped": N, "first_seq": F, "last_seq": L}):

    SAMPLE = {
      "seq": 41, "ts": 1764480000.25, "simulated": false,
      "gpus": [{"index": 0, "uuid": "GPU-...",
                "memory_used_bytes": .., "memory_total_bytes": .., "memory_reserved_bytes": ..,
                "utilization_pct": .., "memory_utilization_pct": .., "power_w": .., "power_limit_w": ..,
                "temperature_c": .., "sm_clock_mhz": .., "mem_clock_mhz": ..,
                "nvlink_tx_bytes_per_s": .., "nvlink_rx_bytes_per_s": ..,
                "nvlink_links": [[tx_bytes_per_s, rx_bytes_per_s], ...],   # index = link id
                "pcie_tx_bytes_per_s": .., "pcie_rx_bytes_per_s": ..,
                "ecc_uncorrected_volatile": .., "ecc_corrected_volatile": ..,   # null: no ECC on this GPU
                "xid_events": [{"xid", "ts"}],
                # also, where the backend reads them (not flattened into rows):
                "remapped_rows_pending": bool, ...,
                "processes": [{"pid": .., "used_memory_bytes": ..}]}],
      "host": {"cpu_pct": .., "ram_used_bytes": .., "ram_total_bytes": ..},
      "nics": [{"name": "mlx5_0/1", "kind": "infiniband" | "roce" | "ethernet",
                "tx_bytes_per_s": .., "rx_bytes_per_s": ..}],
      "workers": [{"id": "w1", "engine": "0", "metrics": {"kv_cache_usage_perc": .., ...}}],
    }

Sequence epochs: `seq` counts per agent state dir, persisted across daemon restarts. When the state is
new (a wiped ~/.cache, a reinstalled server, a fresh temp dir) seq starts at 1 again, under a new random
`epoch` id. The agent sends its epoch in its hello and in the samples.read / samples.subscribe results; a
client compares it with the epoch of the seq it remembers and, when they differ, reads from the start
of the ring instead of after that seq. An agent without the key (older) has no epoch: fall back to
comparing seqs. Added compatibly within protocol 1: peers ignore keys they do not know.

Daemon settings: a running daemon keeps the settings it was started with, whatever flags a later `attach`
carries, so the agent's hello says how it runs: `daemon.prometheus` is where its Prometheus exporter
listens (HOST:PORT, IPv6 in brackets) or null when it serves none; `daemon.prometheus_error` (only when
there is one) says why the exporter it was asked for is not running (e.g. its address is in use). The
app compares them with what it asked for. Added compatibly within protocol 1: a hello without `daemon`
(an older agent, or the app's own hello) decodes to `daemon=None`; keys inside it a peer does not know
are ignored.

GPU processes: `processes` answers nvitop's process table for this server, read when asked (never part of a
sample: command lines are too big to keep 2 h of at 1 Hz): per GPU the processes NVML lists (compute and
graphics), each with its GPU memory, user, command line (cut to 1024 characters) and the agent's worker it
belongs to. Its typed record and bounds are wire_processes.py's (`ProcessListing`, re-exported here); the app
decodes the answer once, with `ProcessListing.from_wire`. A method added within protocol 1: an agent that
predates it answers `unknown_method`, and the app says the agent is too old to list processes.

Per vLLM worker there is one entry per `engine` label (DP rank) and one with engine "" that sums them
(KV usage capacity-weighted); what they carry is meshdeck_agent/scrape.py's. Byte rates are kept to 4
significant digits, per-link NVLink rates to 3 (meshdeck_agent/quantize.py).

Any numeric value may be null when the hardware or driver does not report it. The sample's typed
records are in wire_sample.py (re-exported here): the agent builds every sample as them and the app
decodes every sample with `Sample.from_wire` where it arrives, refusing a bad one whole, naming the
field. Every metric name, with its unit, scope (gpu / nvlink / host / nic / worker), kind (gauge or
counter) and physical range, is in the one metric registry, metric_registry.py; a worker metric an
agent sends that the registry does not know still flows, unitless.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Union

# The version, attach's conflict exit status and the hello field bound live in handshake.py (attach reads
# them without importing this module) and are this module's names too.
from .handshake import ATTACH_EXIT_VERSION_CONFLICT as ATTACH_EXIT_VERSION_CONFLICT
from .handshake import MAX_HELLO_FIELD_CHARS as MAX_HELLO_FIELD_CHARS
from .handshake import PROTOCOL_VERSION as PROTOCOL_VERSION

MAX_LINE_BYTES = 4 * 1024 * 1024

# Anything a peer sent that an error message or a log line repeats is cut to this many characters
# (`excerpt`), and an error reply's message to MAX_ERROR_MESSAGE_CHARS: a 100 KB method name or version
# string is never echoed whole.
EXCERPT_CHARS = 120
MAX_ERROR_MESSAGE_CHARS = 2000
# hello.daemon.prometheus is HOST:PORT (a DNS name is at most 253 characters); hello.daemon.prometheus_error is
# at most MAX_ERROR_MESSAGE_CHARS.
MAX_LISTEN_CHARS = 300
# Python's own default bound on the digits of an integer read from text (since 3.9.14 / 3.10.7 / 3.11).
MAX_INT_DIGITS = 4300


@dataclass(frozen=True)
class Param:
    """One request param: its JSON type(s), whether it must be present, and the most it may be (a
    number's largest value, a string's or a list's longest length; None: unbounded). Numbers are
    finite and >= 0."""

    types: Tuple[type, ...]
    required: bool = False
    maximum: Optional[float] = None


_SECONDS = (int, float)

# method -> {param: Param}: the requests the agent answers and what each takes (`validate_params` checks
# them on the agent's side). The daemon's method table (meshdeck_agent.daemon) pairs each with its handler.
METHOD_PARAMS: Dict[str, Dict[str, Param]] = {
    # {} -> the inventory (shape in meshdeck_agent/inventory.py)
    "inventory": {},
    # {since_seq?, interval_s?} -> {"subscribed": true, "first_seq", "last_seq", "cursor", "interval_s", "epoch"};
    # then `samples` events for seq > cursor (the backlog first; no since_seq: live only), at most one per interval_s
    "samples.subscribe": {"since_seq": Param((int,)), "interval_s": Param(_SECONDS, maximum=3600)},
    "samples.unsubscribe": {},
    # -> {"samples", "dropped", "first_seq", "last_seq", "more": bool, "epoch"}  (limit default 600, at most 7200,
    #    ~3 MiB; "epoch" is the sequence epoch, absent from agents that predate it)
    "samples.read": {"since_seq": Param((int,), required=True), "limit": Param((int,))},
    # -> the worker record {"id", "name", "state", "pid", "exit_code", "signal", "reason", "error", "restarts",
    #    "started_at", "ended_at", "argv", "gpus", "metrics_url", "simulated", "adopted", "log"}
    "workers.start": {"spec": Param((dict,), required=True)},
    # -> the worker record once it ended (SIGTERM to its process group, SIGKILL after grace_s, default 10)
    "workers.stop": {"id": Param((str,), required=True, maximum=64), "grace_s": Param(_SECONDS, maximum=3600)},
    # -> {"workers": [record, ...]}
    "workers.list": {},
    # -> {"data": str, "offset": next, "size": total, "start": offset of data[0]}; no offset: the last `limit` bytes
    "workers.logs": {"id": Param((str,), required=True, maximum=64), "offset": Param((int,)), "limit": Param((int,))},
    # {"path": "/models/DeepSeek-V3.2"} -> {"exists": bool, "files": [[relpath, size], ...]}
    "checks.files": {"path": Param((str,), required=True, maximum=4096)},
    # {"python": "python3"} -> {"python": "3.11.7", "torch": "2.9.0" | null, "vllm": .. | null,
    #                           "nccl": "2.27.3" | null, "ray": .. | null}
    "checks.versions": {"python": Param((str,), maximum=4096)},
    # {"ports": [8000, 29500]} -> {"ports": {"8000": true, "29500": false}}  (true = free)
    "checks.ports_free": {"ports": Param((list,), required=True, maximum=256), "host": Param((str,), maximum=253)},
    # {"host": "10.0.0.1", "port": 29500, "timeout_s": 3} -> {"ok": bool, "error": str | null, "rtt_ms": ..}
    "checks.tcp_connect": {
        "host": Param((str,), required=True, maximum=253),
        "port": Param((int,), required=True, maximum=65535),
        "timeout_s": Param(_SECONDS, maximum=60),
    },
    # {"host": "10.0.0.1"} (an address or a name this server resolves) -> which local interface and source
    # address this server's kernel would use to reach it (a UDP socket connected there, nothing sent):
    # {"host", "address": resolved, "source": "10.0.0.7", "interface": "eth0" | null, "error": str | null}
    "checks.route": {"host": Param((str,), required=True, maximum=253)},
    # {} -> which processes hold each GPU: {"ts", "simulated", "omitted", "reason", "gpus": [{"index", "uuid",
    #    "processes": [{"pid", "kind", "used_memory_bytes", "uid", "user", "command", "command_truncated",
    #    "worker": {"id", "name"} | null}]}]}  (wire_processes.ProcessListing; see "GPU processes" above).
    #    Added within protocol 1: an older agent answers unknown_method.
    "processes": {},
    # Slurm's client commands on a login node (meshdeck_agent/slurm.py): {"command": "sbatch" (sinfo, squeue,
    # sacct, sacctmgr, sbatch, scancel, scontrol), "args": [...], "stdin"?, "timeout_s"?} -> {"rc", "stdout",
    # "stderr", "truncated", "command": argv run}. Added within protocol 1: an older agent answers unknown_method.
    "slurm.run": {
        "command": Param((str,), required=True, maximum=32),
        "args": Param((list,), maximum=64),
        "stdin": Param((str,), maximum=4 * 1024 * 1024),
        "timeout_s": Param(_SECONDS, maximum=300),
    },
    # {"path", "offset"? | "tail"? (bytes from the end), "limit"? (default 64 KiB, at most 1 MiB)} -> {"path",
    # "size", "offset" (where data starts), "data", "eof"}: a regular file (a Slurm job's output)
    "files.read": {
        "path": Param((str,), required=True, maximum=4096),
        "offset": Param((int,)),
        "tail": Param((int,), maximum=1024 * 1024),
        "limit": Param((int,), maximum=1024 * 1024),
    },
    # {} -> {"time": unix seconds on the agent's clock}
    "agent.time": {},
    "agent.shutdown": {},
}
METHODS = tuple(METHOD_PARAMS)

EVENTS = ("samples", "worker", "log", "alert")

# Error codes an error reply may carry.
PARSE_ERROR = "parse_error"  # not JSON, not UTF-8, not an object
LINE_TOO_LONG = "line_too_long"
BAD_REQUEST = "bad_request"  # JSON object but not a request (no method, bad id, ...)
UNKNOWN_METHOD = "unknown_method"
BAD_PARAMS = "bad_params"
NOT_FOUND = "not_found"
CONFLICT = "conflict"
INTERNAL = "internal"
ERROR_CODES = (PARSE_ERROR, LINE_TOO_LONG, BAD_REQUEST, UNKNOWN_METHOD, BAD_PARAMS, NOT_FOUND, CONFLICT, INTERNAL)

WORKER_STATES = ("starting", "running", "restarting", "exited", "failed", "stopped")
RESTART_POLICIES = ("never", "on-failure")


class ProtocolError(Exception):
    """A line or message that breaks the protocol. `code` is one of ERROR_CODES."""

    def __init__(self, code: str, message: str, request_id: Optional[int] = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """`repr(value)` cut to about `limit` characters, saying how long it was: what an error message or a
    log line may repeat of a peer's value."""
    if isinstance(value, str) and len(value) > limit:
        return "%r... (%d characters)" % (value[:limit], len(value))
    text = (
        repr(value)
        if not isinstance(value, int) or value.bit_length() < 1000
        else "<a %d-bit integer>" % value.bit_length()
    )
    return text if len(text) <= limit else "%s... (%d characters)" % (text[:limit], len(text))


class VersionMismatch(Exception):
    """The peer speaks another protocol major; the message names both versions."""

    def __init__(self, ours: int, theirs: Any, peer_agent: Optional[str] = None) -> None:
        who = " (agent %s)" % peer_agent[:MAX_HELLO_FIELD_CHARS] if peer_agent else ""
        super().__init__(
            "protocol mismatch: this side speaks meshdeck protocol %d, the peer%s speaks %s; "
            "re-upload the matching agent" % (ours, who, excerpt(theirs))
        )
        self.ours = ours
        self.theirs = theirs
        self.peer_agent = peer_agent


@dataclass(frozen=True)
class DaemonSettings:
    """How the daemon that answered runs (its own settings; see "Daemon settings" in the module doc)."""

    prometheus: Optional[str] = None  # where its exporter listens, HOST:PORT; None: it serves none
    prometheus_error: Optional[str] = None  # why the exporter it was asked for is not running

    def to_wire(self) -> Dict[str, Any]:
        body: Dict[str, Any] = {"prometheus": self.prometheus}
        if self.prometheus_error is not None:
            body["prometheus_error"] = self.prometheus_error
        return body


@dataclass(frozen=True)
class Hello:
    protocol: int
    agent: str
    epoch: Optional[str] = None  # the agent's sample sequence epoch (None from a client or an older agent)
    daemon: Optional[DaemonSettings] = None  # None from a client or an agent that predates the report


@dataclass(frozen=True)
class Request:
    id: int
    method: str
    params: Dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Response:
    id: int
    result: Any


@dataclass(frozen=True)
class ErrorReply:
    id: Optional[int]
    code: str
    message: str


@dataclass(frozen=True)
class Event:
    event: str
    data: Dict[str, Any]


Message = Union[Hello, Request, Response, ErrorReply, Event]


def _finite(value: Any) -> Any:
    """JSON has no NaN/Infinity; send them as null so every peer can parse the line."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def encode(obj: Dict[str, Any]) -> bytes:
    """One wire line (with trailing newline). Raises ProtocolError if it would exceed the limit."""
    try:
        text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(obj), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    line = text.encode("utf-8") + b"\n"
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError(
            LINE_TOO_LONG, "message of %d bytes exceeds the %d-byte line limit" % (len(line), MAX_LINE_BYTES)
        )
    return line


def hello(agent_version: str, epoch: Optional[str] = None, daemon: Optional[DaemonSettings] = None) -> Dict[str, Any]:
    body: Dict[str, Any] = {"protocol": PROTOCOL_VERSION, "agent": agent_version}
    if epoch is not None:
        body["epoch"] = epoch
    if daemon is not None:
        body["daemon"] = daemon.to_wire()
    return {"hello": body}


def request(request_id: int, method: str, params: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    return {"id": request_id, "method": method, "params": params or {}}


def response(request_id: int, result: Any) -> Dict[str, Any]:
    return {"id": request_id, "result": result}


def error_reply(request_id: Optional[int], code: str, message: str) -> Dict[str, Any]:
    if len(message) > MAX_ERROR_MESSAGE_CHARS:
        message = message[:MAX_ERROR_MESSAGE_CHARS] + "... (%d characters)" % len(message)
    return {"id": request_id, "error": {"code": code, "message": message}}


def event(name: str, data: Dict[str, Any]) -> Dict[str, Any]:
    return {"event": name, "data": data}


def _as_int(value: Any) -> Optional[int]:
    """The value when it is a JSON integer (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _is_int(value: Any) -> bool:
    return _as_int(value) is not None


def _refuse_constant(name: str) -> Any:
    raise ValueError("%s is not JSON (send null for a missing number)" % name)


def _bounded_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS:
        raise ValueError("an integer of %d digits (at most %d)" % (len(text), MAX_INT_DIGITS))
    return int(text)


def _json_options() -> Dict[str, Any]:
    """NaN and Infinity are refused (JSON has neither; Python's json reads them). Integers are bounded as
    Python >= 3.9.14 does by itself (4300 digits): an older Python converts a 4 MB integer in
    quadratic time, holding the GIL; the hook costs a call per integer, so it runs only there."""
    options: Dict[str, Any] = {"parse_constant": _refuse_constant}
    limit = getattr(sys, "get_int_max_str_digits", None)
    if limit is None or limit() == 0:
        options["parse_int"] = _bounded_int
    return options


def decode(line: Union[bytes, str]) -> Message:
    """Parse and validate one line. Raises ProtocolError with a code and a message naming the problem."""
    if isinstance(line, bytes):
        if len(line) > MAX_LINE_BYTES:
            raise ProtocolError(
                LINE_TOO_LONG, "line of %d bytes exceeds the %d-byte limit" % (len(line), MAX_LINE_BYTES)
            )
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(PARSE_ERROR, "line is not UTF-8: %s" % exc) from None
    elif len(line) > MAX_LINE_BYTES:
        raise ProtocolError(LINE_TOO_LONG, "line exceeds the %d-byte limit" % MAX_LINE_BYTES)
    try:
        obj = json.loads(line, **_json_options())
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(PARSE_ERROR, "line is not JSON: %s" % str(exc)[:200]) from None
    if not isinstance(obj, dict):
        raise ProtocolError(PARSE_ERROR, "line is JSON but not an object (got %s)" % type(obj).__name__)
    return _classify(obj)


def _classify(obj: Dict[str, Any]) -> Message:
    raw_id = obj.get("id")
    request_id = _as_int(raw_id)
    if "hello" in obj:
        body = obj["hello"]
        if not isinstance(body, dict) or not _is_int(body.get("protocol")):
            raise ProtocolError(BAD_REQUEST, "hello.protocol must be an integer")
        agent = body.get("agent", "")
        if not isinstance(agent, str) or len(agent) > MAX_HELLO_FIELD_CHARS:
            raise ProtocolError(
                BAD_REQUEST, "hello.agent must be a string of at most %d characters" % MAX_HELLO_FIELD_CHARS
            )
        epoch = body.get("epoch")
        if epoch is not None and (not isinstance(epoch, str) or len(epoch) > MAX_HELLO_FIELD_CHARS):
            raise ProtocolError(
                BAD_REQUEST, "hello.epoch must be a string of at most %d characters" % MAX_HELLO_FIELD_CHARS
            )
        daemon = _daemon_settings(body["daemon"]) if "daemon" in body else None
        return Hello(protocol=body["protocol"], agent=agent, epoch=epoch, daemon=daemon)
    if "event" in obj:
        name, data = obj["event"], obj.get("data", {})
        if not isinstance(name, str) or name not in EVENTS:
            raise ProtocolError(BAD_REQUEST, "event must be one of %s, got %s" % (", ".join(EVENTS), excerpt(name)))
        if not isinstance(data, dict):
            raise ProtocolError(BAD_REQUEST, "event %s: data must be an object" % name)
        return Event(event=name, data=data)
    if "method" in obj:
        if request_id is None or request_id < 0:
            raise ProtocolError(BAD_REQUEST, "request id must be a non-negative integer, got %s" % excerpt(raw_id))
        method = obj["method"]
        if not isinstance(method, str):
            raise ProtocolError(BAD_REQUEST, "method must be a string", raw_id)
        params = obj.get("params", {})
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise ProtocolError(BAD_PARAMS, "params must be an object", raw_id)
        return Request(id=request_id, method=method, params=params)
    if "result" in obj:
        if request_id is None:
            raise ProtocolError(BAD_REQUEST, "response without an integer id")
        return Response(id=request_id, result=obj["result"])
    if "error" in obj:
        err = obj["error"]
        if not isinstance(err, dict) or not isinstance(err.get("code"), str) or not isinstance(err.get("message"), str):
            raise ProtocolError(BAD_REQUEST, "error must be an object with string code and message", request_id)
        return ErrorReply(id=request_id, code=err["code"], message=err["message"])
    raise ProtocolError(BAD_REQUEST, "object is none of hello, request, response, error or event", request_id)


def _daemon_settings(body: Any) -> DaemonSettings:
    """hello.daemon, checked: an object whose `prometheus` is null or a printable HOST:PORT-sized string
    without spaces, and whose `prometheus_error` (optional) is null or a bounded string."""
    if not isinstance(body, dict):
        raise ProtocolError(BAD_REQUEST, "hello.daemon must be an object, got %s" % type(body).__name__)
    listen = body.get("prometheus")
    if listen is not None and (
        not isinstance(listen, str)
        or not 0 < len(listen) <= MAX_LISTEN_CHARS
        or not listen.isprintable()
        or " " in listen
    ):
        raise ProtocolError(
            BAD_REQUEST,
            "hello.daemon.prometheus must be null or HOST:PORT (at most %d printable characters, no spaces), got %s"
            % (MAX_LISTEN_CHARS, excerpt(listen)),
        )
    error = body.get("prometheus_error")
    if error is not None and (not isinstance(error, str) or len(error) > MAX_ERROR_MESSAGE_CHARS):
        raise ProtocolError(
            BAD_REQUEST,
            "hello.daemon.prometheus_error must be null or a string of at most %d characters, got %s"
            % (MAX_ERROR_MESSAGE_CHARS, excerpt(error)),
        )
    return DaemonSettings(prometheus=listen, prometheus_error=error)


def check_hello(msg: Message) -> Hello:
    """The first line from a peer must be a hello with our protocol major."""
    if not isinstance(msg, Hello):
        raise ProtocolError(BAD_REQUEST, "expected a hello as the first line, got %s" % type(msg).__name__)
    if msg.protocol != PROTOCOL_VERSION:
        raise VersionMismatch(PROTOCOL_VERSION, msg.protocol, msg.agent)
    return msg


def validate_params(req: Request) -> Dict[str, Any]:
    """Check a request's method and params against METHOD_PARAMS; unknown params are refused by name."""
    if req.method not in METHOD_PARAMS:
        raise ProtocolError(
            UNKNOWN_METHOD, "unknown method %s; known: %s" % (excerpt(req.method), ", ".join(METHODS)), req.id
        )
    schema = METHOD_PARAMS[req.method]
    for name in req.params:
        if name not in schema:
            raise ProtocolError(
                BAD_PARAMS,
                "%s: unknown param %s (allowed: %s)" % (req.method, excerpt(name), ", ".join(schema) or "none"),
                req.id,
            )
    for name, param in schema.items():
        if name not in req.params:
            if param.required:
                raise ProtocolError(BAD_PARAMS, "%s: missing required param %r" % (req.method, name), req.id)
            continue
        problem = _param_problem(req.params[name], param)
        if problem:
            raise ProtocolError(BAD_PARAMS, "%s: param %r %s" % (req.method, name, problem), req.id)
    return req.params


def _param_problem(value: Any, param: Param) -> Optional[str]:
    """What is wrong with one param's value, or None."""
    if isinstance(value, bool) or not isinstance(value, param.types):
        return "must be %s, got %s" % (" or ".join(t.__name__ for t in param.types), type(value).__name__)
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"  # 1e999 reads as infinity
    if isinstance(value, (int, float)):
        if value < 0:
            return "must be >= 0, got %s" % excerpt(value)
        if param.maximum is not None and value > param.maximum:
            return "must be at most %g, got %s" % (param.maximum, excerpt(value))
    elif param.maximum is not None and isinstance(value, (str, list)) and len(value) > param.maximum:
        return "must have at most %d %s, got %d" % (
            param.maximum,
            "characters" if isinstance(value, str) else "items",
            len(value),
        )
    return None


# ---------------------------------------------------------------------------------------------
# Worker specs: what `workers.start` takes. Both sides build and check them with these helpers.


# A worker id names the worker's directory on its agent (`<state dir>/workers/<id>/`), so it is one plain
# path component: ASCII letters, digits, '-', '_' and '.', not starting with '.' ('.', '..' and hidden
# names are refused), at most 64 characters.
WORKER_ID_PATTERN = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class RestartPolicy:
    policy: str = "never"  # "never" | "on-failure"
    max_restarts: int = 0
    backoff_s: float = 1.0


@dataclass(frozen=True)
class WorkerSpec:
    """One process the agent starts in its own process group and supervises.

    The spec says what runs, on any agent: an agent started with `--simulate` stands in for the engine
    itself when `argv` is `vllm serve ...` (meshdeck_agent.sim.engine), from that same argv; nothing here
    asks for it. A simulated worker's scraped metrics default to http://127.0.0.1:<port>/metrics.
    """

    argv: Tuple[str, ...]
    id: Optional[str] = None
    name: str = ""
    env: Tuple[Tuple[str, str], ...] = ()
    cwd: Optional[str] = None
    gpus: Tuple[int, ...] = ()
    log: Optional[str] = None
    restart: RestartPolicy = RestartPolicy()
    metrics_url: Optional[str] = None

    def to_wire(self) -> Dict[str, Any]:
        return {
            "argv": list(self.argv),
            "id": self.id,
            "name": self.name,
            "env": dict(self.env),
            "cwd": self.cwd,
            "gpus": list(self.gpus),
            "log": self.log,
            "restart": {
                "policy": self.restart.policy,
                "max": self.restart.max_restarts,
                "backoff_s": self.restart.backoff_s,
            },
            "metrics_url": self.metrics_url,
        }

    @classmethod
    def from_wire(cls, spec: Any) -> "WorkerSpec":
        """Validate a spec from the wire. Raises ProtocolError(BAD_PARAMS) naming the field."""

        def bad(path: str, problem: str) -> ProtocolError:
            return ProtocolError(BAD_PARAMS, "spec.%s: %s" % (path, problem))

        if not isinstance(spec, dict):
            raise bad("", "must be an object")
        known = {"argv", "id", "name", "env", "cwd", "gpus", "log", "restart", "metrics_url"}
        if "simulate" in spec:
            raise bad(
                "simulate",
                "is not part of the protocol any more: an agent started with --simulate stands in for "
                "`vllm serve` by itself, from the argv; send the argv a real vLLM gets (upgrade meshdeck)",
            )
        for key in spec:
            if key not in known:
                raise bad(str(key), "unknown field (allowed: %s)" % ", ".join(sorted(known)))
        argv = spec.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise bad("argv", "must be a non-empty list of strings")
        if any("\x00" in a for a in argv):
            raise bad("argv", "must not contain NUL bytes")
        env = spec.get("env") or {}
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise bad("env", "must be an object of string to string")
        for key in env:
            if not key or "=" in key or "\x00" in key or "\x00" in env[key]:
                raise bad("env", "invalid variable name %s" % excerpt(key))
        for name in ("id", "cwd", "log", "metrics_url", "name"):
            value = spec.get(name)
            if value is not None and not isinstance(value, str):
                raise bad(name, "must be a string")
            if value is not None and "\x00" in value:
                raise bad(name, "must not contain NUL bytes")
        metrics_url = spec.get("metrics_url")
        if metrics_url is not None and not metrics_url.startswith(("http://", "https://")):
            raise bad("metrics_url", "must be an http:// or https:// URL, got %s" % excerpt(metrics_url))
        worker_id = spec.get("id")
        if worker_id is not None and WORKER_ID_PATTERN.fullmatch(worker_id) is None:
            raise bad("id", "must be 1-64 ASCII letters, digits, '-', '_' or '.', not starting with '.'")
        gpus = spec.get("gpus") or []
        if not isinstance(gpus, list) or not all(_is_int(g) and g >= 0 for g in gpus):
            raise bad("gpus", "must be a list of non-negative integers")
        restart = spec.get("restart") or {}
        if isinstance(restart, str):
            restart = {"policy": restart}
        if not isinstance(restart, dict):
            raise bad("restart", "must be an object or one of %s" % ", ".join(RESTART_POLICIES))
        policy = restart.get("policy", "never")
        if policy not in RESTART_POLICIES:
            raise bad("restart.policy", "must be one of %s, got %s" % (", ".join(RESTART_POLICIES), excerpt(policy)))
        max_restarts = restart.get("max", 3 if policy == "on-failure" else 0)
        if not _is_int(max_restarts) or max_restarts < 0:
            raise bad("restart.max", "must be a non-negative integer")
        backoff = restart.get("backoff_s", 1.0)
        if isinstance(backoff, bool) or not isinstance(backoff, (int, float)) or backoff < 0:
            raise bad("restart.backoff_s", "must be a non-negative number")
        return cls(
            argv=tuple(argv),
            id=worker_id,
            name=spec.get("name") or "",
            env=tuple(sorted(env.items())),
            cwd=spec.get("cwd"),
            gpus=tuple(gpus),
            log=spec.get("log"),
            restart=RestartPolicy(policy, max_restarts, float(backoff)),
            metrics_url=spec.get("metrics_url"),
        )


def _number(value: Any) -> Optional[float]:
    """A finite number as a float, else None (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


# ---------------------------------------------------------------------------------------------
# Worker records and logs: what the agent says about a worker. Decoded once where they enter the app.


@dataclass(frozen=True)
class WorkerRecord:
    """One worker as the agent reports it: the answer to `workers.start` / `workers.stop`, each entry of
    `workers.list`, the data of a `worker` event. Keys the app does not read (argv, gpus, log, ...) are
    ignored, so an agent may add some within protocol 1; the ones read must have their types."""

    id: str
    state: str  # one of WORKER_STATES
    name: str = ""
    pid: Optional[int] = None
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    reason: str = ""
    error: Optional[str] = None
    restarts: int = 0
    started_at: Optional[float] = None
    ended_at: Optional[float] = None

    @classmethod
    def from_wire(cls, record: Any, where: str = "worker") -> "WorkerRecord":
        """Check a record from the wire. Raises ProtocolError(BAD_REQUEST) naming `where` and the field."""

        def bad(path: str, problem: str) -> ProtocolError:
            return ProtocolError(BAD_REQUEST, "%s%s: %s" % (where, "." + path if path else "", problem))

        if not isinstance(record, dict):
            raise bad("", "must be an object, got %s" % type(record).__name__)
        worker_id = record.get("id")
        if not isinstance(worker_id, str) or not worker_id:
            raise bad("id", "must be a non-empty string")
        state = record.get("state")
        if not isinstance(state, str) or state not in WORKER_STATES:
            raise bad("state", "must be one of %s, got %s" % (", ".join(WORKER_STATES), _shown(state)))
        for name in ("name", "reason", "error"):
            if record.get(name) is not None and not isinstance(record[name], str):
                raise bad(name, "must be a string or null")
        for name in ("pid", "exit_code", "signal"):
            if record.get(name) is not None and not _is_int(record[name]):
                raise bad(name, "must be an integer or null, got %s" % _shown(record[name]))
        restarts = record.get("restarts", 0)
        if not _is_int(restarts) or restarts < 0:
            raise bad("restarts", "must be a non-negative integer, got %s" % _shown(restarts))
        for name in ("started_at", "ended_at"):
            if record.get(name) is not None and _number(record[name]) is None:
                raise bad(name, "must be a number (Unix time) or null, got %s" % _shown(record[name]))
        return cls(
            id=worker_id,
            state=state,
            name=record.get("name") or "",
            pid=record.get("pid"),
            exit_code=record.get("exit_code"),
            signal=record.get("signal"),
            reason=record.get("reason") or "",
            error=record.get("error"),
            restarts=restarts,
            started_at=_number(record.get("started_at")),
            ended_at=_number(record.get("ended_at")),
        )


@dataclass(frozen=True)
class LogChunk:
    """The answer to `workers.logs`: `data` read from byte `start`; `offset` is where to read next."""

    data: str
    offset: int
    size: Optional[int] = None
    start: Optional[int] = None

    @classmethod
    def from_wire(cls, reply: Any, where: str = "workers.logs") -> "LogChunk":
        """Check an answer from the wire. Raises ProtocolError(BAD_REQUEST) naming `where` and the field."""
        if not isinstance(reply, dict):
            raise ProtocolError(BAD_REQUEST, "%s: must be an object, got %s" % (where, type(reply).__name__))
        data = reply.get("data")
        if not isinstance(data, str):
            raise ProtocolError(BAD_REQUEST, "%s.data: must be a string, got %s" % (where, _shown(data)))
        for name in ("offset", "size", "start"):
            value = reply.get(name)
            offset = _as_int(value)
            if (name == "offset" or value is not None) and (offset is None or offset < 0):
                raise ProtocolError(BAD_REQUEST, "%s.%s: must be a byte offset, got %s" % (where, name, _shown(value)))
        return cls(data=data, offset=reply["offset"], size=reply.get("size"), start=reply.get("start"))


def worker_records_from_wire(listing: Any) -> List[WorkerRecord]:
    """The records of a `workers.list` answer ({"workers": [record, ...]}); ProtocolError names the bad one."""
    if not isinstance(listing, dict) or not isinstance(listing.get("workers"), list):
        raise ProtocolError(BAD_REQUEST, 'workers.list: must be an object with a list "workers"')
    return [WorkerRecord.from_wire(r, "workers.list.workers[%d]" % i) for i, r in enumerate(listing["workers"])]


def _shown(value: Any) -> str:
    """A wire value in an error message, cut short (it may be megabytes)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---------------------------------------------------------------------------------------------
# Samples, the `inventory` and the `processes` results: their typed records live in wire_sample.py /
# wire_inventory.py / wire_processes.py (the metric registry in metric_registry.py), re-exported here on first use. `attach` — one process per
# host, a relay that needs only the hello — then starts without them: ~27 ms less CPU per start, ~7 s of
# a 278-host fleet's connect storm on one machine.
_REEXPORTED = {
    "Cpu": "wire_inventory",
    "Gpu": "wire_inventory",
    "Inventory": "wire_inventory",
    "InventoryError": "wire_inventory",
    "Nic": "wire_inventory",
    "NumaNode": "wire_inventory",
    "NvLink": "wire_inventory",
    "Topology": "wire_inventory",
    "GPU_METRICS": "wire_sample",
    "HOST_METRICS": "wire_sample",
    "NIC_METRICS": "wire_sample",
    "NVLINK_METRICS": "wire_sample",
    "GpuSample": "wire_sample",
    "HostSample": "wire_sample",
    "Metric": "wire_sample",
    "NicSample": "wire_sample",
    "Sample": "wire_sample",
    "SampleError": "wire_sample",
    "WorkerSample": "wire_sample",
    "decode_samples_message": "wire_sample",
    "GpuProcesses": "wire_processes",
    "GpuProcessInfo": "wire_processes",
    "ProcessListing": "wire_processes",
    "ProcessListingError": "wire_processes",
    "ProcessWorker": "wire_processes",
}

if TYPE_CHECKING:
    from .wire_inventory import Cpu as Cpu
    from .wire_inventory import Gpu as Gpu
    from .wire_inventory import Inventory as Inventory
    from .wire_inventory import InventoryError as InventoryError
    from .wire_inventory import Nic as Nic
    from .wire_inventory import NumaNode as NumaNode
    from .wire_inventory import NvLink as NvLink
    from .wire_inventory import Topology as Topology
    from .wire_processes import GpuProcesses as GpuProcesses
    from .wire_processes import GpuProcessInfo as GpuProcessInfo
    from .wire_processes import ProcessListing as ProcessListing
    from .wire_processes import ProcessListingError as ProcessListingError
    from .wire_processes import ProcessWorker as ProcessWorker
    from .wire_sample import GPU_METRICS as GPU_METRICS
    from .wire_sample import HOST_METRICS as HOST_METRICS
    from .wire_sample import NIC_METRICS as NIC_METRICS
    from .wire_sample import NVLINK_METRICS as NVLINK_METRICS
    from .wire_sample import GpuSample as GpuSample
    from .wire_sample import HostSample as HostSample
    from .wire_sample import Metric as Metric
    from .wire_sample import NicSample as NicSample
    from .wire_sample import Sample as Sample
    from .wire_sample import SampleError as SampleError
    from .wire_sample import WorkerSample as WorkerSample
    from .wire_sample import decode_samples_message as decode_samples_message


def __getattr__(name: str) -> Any:
    module = _REEXPORTED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module("." + module, __package__), name)
    globals()[name] = value
    return value
