"""The agent daemon: one per server user and socket, serving the NDJSON protocol on a Unix socket.

It owns the sampler (machine -> ring), the worker supervisor, the optional Prometheus exporter and the
client sessions. An exporter that cannot listen (its address in use, not on this server) is logged and
left off: the daemon serves its socket all the same and its hello says why (`settings()`), so the app
can tell the operator instead of seeing an agent that died at start. Only one daemon serves a socket: an exclusive lock on `<socket>.lock` decides, so a
second `serve` (or a racing `attach`) fails cleanly instead of stealing the socket. The socket is 0600
in a 0700 directory (paths.py) and a peer with another uid is refused (SO_PEERCRED).
An accept() that fails for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) is retried
after a growing wait and logged once per burst (accept_backoff.py): the daemon keeps serving.

Sample seqs continue across restarts: the daemon reserves seqs ahead in `<state>/seq.json` and writes
the exact next seq on a clean shutdown, so a client that remembers seq 5000 is never told "nothing
new" by a restarted agent; after a crash the gap (at most SEQ_RESERVE) shows up as `dropped`.

The sequence has an epoch: a random id created with seq.json and kept in it. A daemon restarted on the
same state keeps it; a new state dir (a wiped ~/.cache, a reinstalled server, a demo's fresh temp dir)
starts seq at 1 under a new epoch. The daemon sends it in its hello and in samples.read/subscribe
results, so a client that remembers "seq 5000" can tell a continued sequence from a new one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import socket
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import __version__, checks, protocol, slurm
from .accept_backoff import AcceptBackoff, out_of_resources
from .gpu.processes import build_listing
from .gpu.simulated import IDLE_USED_BYTES
from .keeper import process_start_time
from .machine import Machine, build_machine
from .paths import atomic_write, check_socket_path, ensure_private_dir
from .procinfo import ProcReader
from .ring import DEFAULT_CAPACITY, SampleRing
from .sampler import Sampler
from .session import RawResult, Session
from .sim.engine import DEFAULT_STARTUP_S, StandInChooser
from .workers.supervisor import Supervisor

log = logging.getLogger(__name__)

SEQ_RESERVE = 600
READ_DEFAULT_LIMIT = 600
READ_MAX_LIMIT = 7200


class AlreadyRunning(Exception):
    """Another daemon holds this socket's lock."""


@dataclass(frozen=True)
class DaemonConfig:
    socket_path: str
    state_dir: str
    simulate: Optional[str] = None
    seed: int = 0
    interval_s: float = 1.0
    prometheus: Optional[str] = None
    ring_capacity: Optional[int] = None
    sim_vllm_startup_s: float = DEFAULT_STARTUP_S  # how long a simulated vLLM takes to start (--simulate only)
    watch_engines: Tuple[Tuple[str, str], ...] = ()  # (worker id, metrics URL) of engines it did not start


def new_epoch() -> str:
    """A fresh sequence epoch: 16 random hex digits."""
    return secrets.token_hex(8)


def _valid_epoch(value: Any) -> bool:
    return isinstance(value, str) and 1 <= len(value) <= 64 and all(c.isalnum() or c in "-_" for c in value)


class SeqStore:
    """The next seq and the sequence's epoch, persisted in `<state>/seq.json` ({"next_seq", "epoch"}).

    A missing or unreadable file starts seq 1 under a new epoch. A file from an agent that had no
    epochs yet keeps its seq and gets an epoch (the sequence itself continues)."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            with open(path) as handle:
                saved = json.load(handle)
            self.first = max(1, int(saved.get("next_seq", 1)))
            epoch = saved.get("epoch")
            self.epoch = epoch if _valid_epoch(epoch) else new_epoch()
        except (OSError, ValueError, AttributeError, TypeError):
            self.first = 1
            self.epoch = new_epoch()
        self.reserved = self.first - 1
        self.reserve(self.first)

    def _write(self, next_seq: int) -> None:
        atomic_write(self.path, json.dumps({"next_seq": next_seq, "epoch": self.epoch}).encode())

    def reserve(self, seq: int) -> None:
        if seq > self.reserved - 1:
            self.reserved = seq + SEQ_RESERVE
            self._write(self.reserved + 1)

    def close(self, next_seq: int) -> None:
        self._write(next_seq)


class Daemon:
    def __init__(self, config: DaemonConfig, machine: Optional[Machine] = None) -> None:
        self.config = config
        self.socket_path = check_socket_path(config.socket_path)
        self.state_dir = ensure_private_dir(config.state_dir)
        self._lock_file = self._take_lock()
        self.seqs = SeqStore(os.path.join(self.state_dir, "seq.json"))
        capacity = config.ring_capacity or max(DEFAULT_CAPACITY, int(7200 / config.interval_s))
        self.ring = SampleRing(capacity=capacity, first_seq=self.seqs.first)
        self._sessions: List[Session] = []
        self._sessions_lock = threading.Lock()
        self._shutdown_requested = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="rpc")
        self.machine = (
            machine
            if machine is not None
            else build_machine(config.simulate, config.seed, activity=self._sim_activity, on_alert=self._alert)
        )
        stand_ins = (
            StandInChooser(self.machine.spec, startup_s=config.sim_vllm_startup_s)
            if self.machine.spec is not None
            else None
        )
        self.supervisor = Supervisor(
            self.state_dir, self.broadcast, stand_ins, config.interval_s, free_gpu_bytes=self._free_gpu_bytes
        )
        self.sampler = Sampler(
            self.machine, self.ring, config.interval_s, workers=self.supervisor.sample_entries, on_sample=self._sampled
        )
        self.exporter: Any = None
        self.exporter_error: Optional[str] = None  # why the exporter asked for is not running
        self._listener: Optional[socket.socket] = None
        self._pid_path = os.path.join(self.state_dir, "agent.pid")
        self._procs = ProcReader()  # /proc, for the `processes` answer (caches user names)

    # -- setup -----------------------------------------------------------------------------------

    def _take_lock(self) -> Any:
        fd = os.open(self.socket_path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        handle = os.fdopen(fd, "r+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise AlreadyRunning("another meshdeck-agent already serves %s" % self.socket_path) from None
        return handle

    def _bind(self) -> socket.socket:
        if os.path.lexists(self.socket_path):
            os.unlink(self.socket_path)  # stale: we hold the lock, so nobody serves it
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            listener.bind(self.socket_path)
        finally:
            os.umask(old_umask)
        os.chmod(self.socket_path, 0o600)
        listener.listen(64)
        listener.settimeout(0.5)
        return listener

    def start(self) -> None:
        """Start every part except the accept loop (serve_forever runs that)."""
        self._listener = self._bind()
        pid = os.getpid()
        record = {"pid": pid, "start_time": process_start_time(pid), "agent": __version__, "socket": self.socket_path}
        atomic_write(self._pid_path, json.dumps(record).encode())
        self.machine.start()
        self.supervisor.start()
        for worker_id, url in self.config.watch_engines:
            self.supervisor.watch_engine(worker_id, url)
        self.sampler.start()
        if self.config.prometheus:
            self._start_exporter(self.config.prometheus)
        log.info(
            "meshdeck-agent serving %s (simulate=%s, interval %.3gs, state %s)",
            self.socket_path,
            self.config.simulate,
            self.config.interval_s,
            self.state_dir,
        )

    def _start_exporter(self, listen: str) -> None:
        from .exporter import Exporter

        exporter = Exporter(self.ring, self.machine)
        try:
            exporter.start(listen)
        except OSError as exc:  # in use, not an address of this server, a name that does not resolve
            reason = exc.strerror or str(exc)
            self.exporter_error = ("cannot listen on %s: %s" % (listen, reason))[:500]  # hello bounds it
            log.error("Prometheus exporter: %s; serving without it", self.exporter_error)
            return
        self.exporter = exporter

    def settings(self) -> protocol.DaemonSettings:
        """How this daemon runs, for its hello: where its exporter listens, or why the one asked for does not."""
        listening = self.exporter.listening() if self.exporter is not None else None
        return protocol.DaemonSettings(prometheus=listening, prometheus_error=self.exporter_error)

    def serve_forever(self) -> None:
        if self._listener is None:
            self.start()
        assert self._listener is not None
        backoff = AcceptBackoff()
        try:
            while not self._shutdown_requested.is_set():
                try:
                    connection, _ = self._listener.accept()
                except socket.timeout:
                    continue
                except OSError as exc:
                    if self._shutdown_requested.is_set():
                        break
                    if not out_of_resources(exc):
                        raise
                    if backoff.failed():  # no descriptor or memory left: wait for some, keep serving
                        log.error("accepting a connection on %s failed (%s); retrying", self.socket_path, exc)
                    self._shutdown_requested.wait(backoff.delay_s)
                    continue
                failures = backoff.succeeded()
                if failures:
                    log.warning("accepting connections again after %d failed accepts", failures)
                try:
                    self._accept(connection)
                except (OSError, RuntimeError) as exc:  # a peer gone already; no thread left to serve it
                    log.error("serving a new connection failed: %s", exc)
                    connection.close()
        finally:
            self._stop()

    def _accept(self, connection: socket.socket) -> None:
        connection.settimeout(None)
        try:
            creds = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("3i", creds)
        except (OSError, AttributeError):
            uid = os.geteuid()
        if uid != os.geteuid():
            log.warning("refusing a connection from uid %d", uid)
            connection.close()
            return
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 120, 0))
        session = Session(connection, self, name="client-%d" % connection.fileno())
        with self._sessions_lock:
            self._sessions.append(session)
        try:
            threading.Thread(target=session.run, name="session", daemon=True).start()
        except RuntimeError:
            self.session_ended(session)
            raise

    def request_shutdown(self) -> None:
        self._shutdown_requested.set()

    def _stop(self) -> None:
        log.info("meshdeck-agent shutting down; workers keep running")
        if self._listener is not None:
            self._listener.close()
        self.sampler.stop()
        self.supervisor.close()
        if self.exporter is not None:
            self.exporter.stop()
        with self._sessions_lock:
            sessions = list(self._sessions)
        for session in sessions:
            session.close_after_flush()
            with contextlib.suppress(OSError):
                session.sock.shutdown(socket.SHUT_RDWR)
        self._pool.shutdown(wait=False)
        self.machine.close()
        self.seqs.close(self.ring.last_seq + 1 if self.ring.last_seq else self.seqs.first)
        for path in (self.socket_path, self._pid_path):
            with contextlib.suppress(OSError):
                os.unlink(path)
        self._lock_file.close()

    # -- plumbing used by sessions, sampler and supervisor ----------------------------------------

    def session_ended(self, session: Session) -> None:
        with self._sessions_lock:
            if session in self._sessions:
                self._sessions.remove(session)

    def broadcast(self, name: str, data: Dict[str, Any]) -> None:
        line = protocol.encode(protocol.event(name, data))
        with self._sessions_lock:
            sessions = list(self._sessions)
        for session in sessions:
            session.post_event(line)

    def _alert(self, data: Dict[str, Any]) -> None:
        self.broadcast("alert", data)

    def _sampled(self, seq: int) -> None:
        self.seqs.reserve(seq)
        with self._sessions_lock:
            sessions = list(self._sessions)
        for session in sessions:
            if session.subscribed:
                session.wake()

    def _sim_activity(self) -> List[Any]:
        return self.supervisor.sim_activity() if hasattr(self, "supervisor") else []

    def _free_gpu_bytes(self, gpus: List[int], worker_id: str) -> int:
        """The least free memory among these simulated GPUs for a stand-in about to start: what the other
        stand-ins hold now (not the last sample, which can be an interval old and still count a stand-in
        that has just stopped)."""
        held = {gpu: 0 for gpu in gpus}
        for activity in self._sim_activity():
            if activity.worker_id != worker_id:
                for gpu in activity.gpus:
                    if gpu in held:
                        held[gpu] += activity.held_bytes_per_gpu
        rooms = [
            g["memory_total_bytes"] - g["memory_reserved_bytes"] - IDLE_USED_BYTES - held[g["index"]]
            for g in self.machine.inventory()["gpus"]
            if g["index"] in held
        ]
        return max(0, int(min(rooms))) if rooms else 0

    # -- requests --------------------------------------------------------------------------------

    def dispatch(self, session: Session, request: protocol.Request) -> None:
        try:
            params = protocol.validate_params(request)
        except protocol.ProtocolError as exc:
            session.refuse(request.id, exc.code, exc.message)
            return
        method = METHOD_TABLE[request.method]  # validate_params knows only the methods the table has
        if method.slow:
            session.begin_request()
            self._pool.submit(self._answer_async, session, request, method, params)
        else:
            self._answer(session, request, method, params)

    def _answer_async(
        self, session: Session, request: protocol.Request, method: "Method", params: Dict[str, Any]
    ) -> None:
        try:
            self._answer(session, request, method, params)
        finally:
            session.end_request()

    def _answer(self, session: Session, request: protocol.Request, method: "Method", params: Dict[str, Any]) -> None:
        try:
            result = method.handler(self, session, request, params)
        except protocol.ProtocolError as exc:
            line = protocol.encode(protocol.error_reply(request.id, exc.code, exc.message))
        except Exception as exc:  # a bug must not end the session or the daemon
            session.problems.log(logging.ERROR, "%s failed", request.method, exc_info=True)
            message = "%s: %s" % (type(exc).__name__, exc)
            line = protocol.encode(protocol.error_reply(request.id, protocol.INTERNAL, message))
        else:
            if result is None:
                return  # the handler queued its own reply
            if isinstance(result, RawResult):
                line = b'{"id":%d,"result":' % request.id + result.body + b"}\n"
            else:
                try:
                    line = protocol.encode(protocol.response(request.id, result))
                except protocol.ProtocolError as exc:
                    line = protocol.encode(protocol.error_reply(request.id, exc.code, exc.message))
        session.reply(line)

    # -- one handler per method (METHOD_TABLE below) ---------------------------------------------
    # Each takes (session, request, params) with params checked against protocol.METHOD_PARAMS and
    # returns the result, a RawResult, or None when it queued its own reply.

    def _inventory(self, _session: Session, _request: protocol.Request, _params: Dict[str, Any]) -> Any:
        return self.machine.inventory()

    def _subscribe(self, session: Session, request: protocol.Request, params: Dict[str, Any]) -> None:
        last = self.ring.last_seq
        since = params.get("since_seq")
        # a since_seq beyond the newest sample (the client remembers a wiped state dir) starts live
        cursor = last if since is None or since > last else since
        result = {
            "subscribed": True,
            "first_seq": self.ring.first_seq,
            "last_seq": last,
            "cursor": cursor,
            "interval_s": self.config.interval_s,
            "epoch": self.seqs.epoch,
        }
        response = protocol.encode(protocol.response(request.id, result))
        session.subscribe(cursor, float(params.get("interval_s", 0.0)), response)

    def _unsubscribe(self, session: Session, _request: protocol.Request, _params: Dict[str, Any]) -> Any:
        session.unsubscribe()
        return {"subscribed": False}

    def _read_samples(self, _session: Session, _request: protocol.Request, params: Dict[str, Any]) -> RawResult:
        limit = min(READ_MAX_LIMIT, max(1, params.get("limit", READ_DEFAULT_LIMIT)))
        read = self.ring.read(params["since_seq"], limit=limit)
        more = read.next_since < read.last_seq
        body = b'{"samples":%s,"dropped":%d,"first_seq":%d,"last_seq":%d,"more":%s,"epoch":%s}' % (
            read.samples_json(),
            read.dropped,
            read.first_seq,
            read.last_seq,
            b"true" if more else b"false",
            json.dumps(self.seqs.epoch).encode(),
        )
        return RawResult(body)

    def _start_worker(self, _session: Session, _request: protocol.Request, params: Dict[str, Any]) -> Any:
        return self.supervisor.start_worker(params["spec"])

    def _stop_worker(self, _session: Session, _request: protocol.Request, params: Dict[str, Any]) -> Any:
        return self.supervisor.stop_worker(params["id"], float(params.get("grace_s", 10.0)))

    def _list_workers(self, _session: Session, _request: protocol.Request, _params: Dict[str, Any]) -> Any:
        return {"workers": self.supervisor.list_workers()}

    def _worker_logs(self, _session: Session, _request: protocol.Request, params: Dict[str, Any]) -> Any:
        return self.supervisor.logs(params["id"], params.get("offset"), params.get("limit"))

    def _check_files(self, _session: Session, _request: protocol.Request, params: Dict[str, Any]) -> Any:
        return checks.check_files(params["path"])

    def _check_versions(self, _session: Session, _request: protocol.Request, params: Dict[str, Any]) -> Any:
        return checks.check_versions(params.get("python", "python3"))

    def _check_ports_free(self, _session: Session, _request: protocol.Request, params: Dict[str, Any]) -> Any:
        return checks.check_ports_free(params["ports"], params.get("host", "0.0.0.0"))

    def _check_tcp_connect(self, _session: Session, _request: protocol.Request, params: Dict[str, Any]) -> Any:
        return checks.check_tcp_connect(params["host"], params["port"], params.get("timeout_s", 3.0))

    def _check_route(self, _session: Session, _request: protocol.Request, params: Dict[str, Any]) -> Any:
        return checks.check_route(params["host"])

    def _processes(self, _session: Session, _request: protocol.Request, _params: Dict[str, Any]) -> Any:
        owners = self.supervisor.process_owners()
        simulated = self.machine.simulated
        return build_listing(
            self.machine.gpu_processes, self._procs, owners, simulated=simulated, now=time.time()
        ).to_wire()

    def _slurm_run(self, _session: Session, _request: protocol.Request, params: Dict[str, Any]) -> Any:
        return slurm.run_slurm(params)

    def _read_file(self, _session: Session, _request: protocol.Request, params: Dict[str, Any]) -> Any:
        return slurm.read_file(params)

    def _time(self, _session: Session, _request: protocol.Request, _params: Dict[str, Any]) -> Any:
        return {"time": time.time()}

    def _shutdown(self, _session: Session, _request: protocol.Request, _params: Dict[str, Any]) -> Any:
        threading.Timer(0.3, self.request_shutdown).start()
        return {"shutting_down": True, "workers_keep_running": True}


Handler = Callable[[Daemon, Session, protocol.Request, Dict[str, Any]], Any]


@dataclass(frozen=True)
class Method:
    """One request the daemon answers: its params (the wire spec, protocol.METHOD_PARAMS), whether it is
    slow, and its handler. A slow method is answered on the daemon's pool so the session keeps reading
    meanwhile: it may wait on DNS, a subprocess, a worker's exit, the disk or the GPUs."""

    params: Dict[str, protocol.Param]
    slow: bool
    handler: Handler


def _method(name: str, handler: Handler, slow: bool = False) -> Tuple[str, Method]:
    return name, Method(protocol.METHOD_PARAMS[name], slow, handler)


METHOD_TABLE: Dict[str, Method] = dict(
    [
        _method("inventory", Daemon._inventory, slow=True),
        _method("samples.subscribe", Daemon._subscribe),
        _method("samples.unsubscribe", Daemon._unsubscribe),
        _method("samples.read", Daemon._read_samples),
        _method("workers.start", Daemon._start_worker, slow=True),
        _method("workers.stop", Daemon._stop_worker, slow=True),
        _method("workers.list", Daemon._list_workers),
        _method("workers.logs", Daemon._worker_logs),
        _method("checks.files", Daemon._check_files, slow=True),
        _method("checks.versions", Daemon._check_versions, slow=True),
        _method("checks.ports_free", Daemon._check_ports_free),
        _method("checks.tcp_connect", Daemon._check_tcp_connect, slow=True),
        _method("checks.route", Daemon._check_route, slow=True),  # resolving a host name may wait on DNS
        _method("processes", Daemon._processes, slow=True),  # NVML and /proc: never on the session's thread
        _method("slurm.run", Daemon._slurm_run, slow=True),  # a subprocess, up to its timeout
        _method("files.read", Daemon._read_file, slow=True),  # a shared filesystem may be slow
        _method("agent.time", Daemon._time),
        _method("agent.shutdown", Daemon._shutdown),
    ]
)
if set(METHOD_TABLE) != set(protocol.METHOD_PARAMS):
    raise ImportError(
        "meshdeck_agent.daemon: methods without a handler: %s"
        % ", ".join(sorted(set(protocol.METHOD_PARAMS) - set(METHOD_TABLE)))
    )
