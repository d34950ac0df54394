"""meshdeck-agent command line.

    meshdeck-agent serve   [--socket PATH] [--simulate SPEC] [--seed N] [--interval S]
                           [--prometheus HOST:PORT] [--state-dir DIR] [--log-file FILE] [--log-level L]
    meshdeck-agent attach  [same options]   start the daemon if none answers, relay stdin/stdout to it
    meshdeck-agent inventory [--simulate SPEC] [--seed N] [--json]
    meshdeck-agent version [--json]
    meshdeck-agent capture-nvml [--out FILE]   record NVML's answers here as a test fixture

Works as `python -m meshdeck_agent`, as the console script, and as `python3 -I meshdeck-agent.pyz`.
Exit status: 0 ok, 2 bad input (one line on stderr naming it), 3 another daemon already serves the
socket, 4 (attach) a daemon of another version serves the socket and could not be replaced (the line on
stderr names both versions), 1 anything else. `keeper` and `simvllm` are internal subcommands the daemon runs itself.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, List, Optional, Tuple

from . import __version__

if TYPE_CHECKING:
    import logging

# `attach` runs once per connection (DESIGN §1), so what it imports is its start-up cost on every server and,
# for local agents, on the console's own machine: the modules only other commands need are imported there.


def _add_serve_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--socket", metavar="PATH", help="Unix socket (default: $XDG_RUNTIME_DIR/meshdeck/agent.sock)")
    parser.add_argument(
        "--simulate",
        metavar="SPEC",
        help="simulate a server, e.g. 8xH200 (H100, H20, B200, A100, L40S, RTX-4090; 1-16)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulation (default 0)")
    parser.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between samples (default 1)")
    parser.add_argument(
        "--prometheus", metavar="HOST:PORT", help="also serve Prometheus metrics there (e.g. 127.0.0.1:9400)"
    )
    parser.add_argument("--state-dir", metavar="DIR", help="workers and logs (default: next to the socket)")
    parser.add_argument("--log-level", default="INFO", help="daemon log level (default INFO)")
    parser.add_argument(
        "--watch-engine",
        action="append",
        default=[],
        metavar="ID=URL",
        help="also scrape an engine it did not start (its /metrics URL) as worker ID; repeatable, at most %d"
        % MAX_WATCHED,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="meshdeck-agent", description="meshdeck's agent on a GPU server.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = commands.add_parser("serve", help="run the daemon in the foreground")
    _add_serve_options(serve)
    serve.add_argument("--log-file", metavar="FILE", help="log here instead of stderr")
    attach = commands.add_parser("attach", help="relay stdin/stdout to the daemon, starting it if needed")
    _add_serve_options(attach)
    attach.add_argument(
        "--no-start", action="store_true", help="only reach a daemon that runs already (exit 1 if none answers)"
    )
    inventory = commands.add_parser("inventory", help="print this server's GPUs, links, NICs, CPU and RAM once")
    inventory.add_argument("--simulate", metavar="SPEC")
    inventory.add_argument("--seed", type=int, default=0)
    inventory.add_argument("--json", action="store_true", help="print the inventory JSON")
    version = commands.add_parser("version", help="print the agent and protocol version")
    version.add_argument("--json", action="store_true")
    capture = commands.add_parser("capture-nvml", help="record NVML's answers on this GPU server as a test fixture")
    capture.add_argument("--out", metavar="FILE", help="write the JSON here (default: stdout)")
    capture.add_argument("--reads", type=int, default=3, help="NVLink counter readings to keep (default 3)")
    capture.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between readings")
    keeper = commands.add_parser("keeper")
    keeper.add_argument("worker_dir")
    commands.add_parser("simvllm", add_help=False)
    return parser


class BadOption(Exception):
    """An option that is refused (exit status 2), found where checking it needs an import of its own."""


def _fail(message: str, code: int = 2) -> int:
    sys.stderr.write("meshdeck-agent: error: %s\n" % message)
    return code


MAX_WATCHED = 16


def parse_watched(values: List[str]) -> Tuple[Tuple[str, str], ...]:
    """`--watch-engine ID=URL` values -> (id, url) pairs; ValueError naming the option for a bad one."""
    from .protocol import WORKER_ID_PATTERN

    if len(values) > MAX_WATCHED:
        raise ValueError("--watch-engine: at most %d engines, got %d" % (MAX_WATCHED, len(values)))
    pairs = []
    for value in values:
        worker_id, sep, url = value.partition("=")
        if not sep or WORKER_ID_PATTERN.fullmatch(worker_id) is None:
            raise ValueError("--watch-engine: %r must be ID=URL with ID a worker id (letters, digits, . _ -)" % value)
        if not url.startswith(("http://", "https://")) or len(url) > 2048 or not url.isprintable():
            raise ValueError("--watch-engine: %r: the URL must be http:// or https://" % value)
        pairs.append((worker_id, url))
    return tuple(pairs)


def _check_interval(value: float) -> Optional[str]:
    return None if 0.05 <= value <= 3600 else "--interval must be between 0.05 and 3600 seconds, got %g" % value


def _locations(args: argparse.Namespace) -> Tuple[str, str]:
    from .paths import default_socket_path, default_state_dir

    socket_path = os.path.abspath(args.socket or default_socket_path())
    return socket_path, os.path.abspath(args.state_dir or default_state_dir(socket_path))


def _serve(args: argparse.Namespace) -> int:
    import logging
    import signal

    from .daemon import AlreadyRunning, Daemon, DaemonConfig
    from .gpu.catalog import SimulateSpecError, parse_simulate
    from .paths import UnsafePath

    problem = _check_interval(args.interval)
    if problem:
        return _fail(problem)
    handlers: List[logging.Handler] = []
    if args.log_file:
        from logging.handlers import RotatingFileHandler

        handlers.append(RotatingFileHandler(args.log_file, maxBytes=8 << 20, backupCount=2))
    logging.basicConfig(
        level=str(args.log_level).upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=handlers or None,
    )
    try:
        parse_simulate(args.simulate)
        if args.prometheus:
            from .exporter import parse_listen

            parse_listen(args.prometheus)
        socket_path, state_dir = _locations(args)
        config = DaemonConfig(
            socket_path=socket_path,
            state_dir=state_dir,
            simulate=args.simulate,
            seed=args.seed,
            interval_s=args.interval,
            prometheus=args.prometheus,
            watch_engines=parse_watched(args.watch_engine),
        )
        daemon = Daemon(config)
    except (SimulateSpecError, UnsafePath, ValueError) as exc:
        return _fail(str(exc))
    except AlreadyRunning as exc:
        return _fail(str(exc), 3)
    signal.signal(signal.SIGTERM, lambda *_: daemon.request_shutdown())
    signal.signal(signal.SIGINT, lambda *_: daemon.request_shutdown())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    daemon.serve_forever()
    return 0


def _attach(args: argparse.Namespace) -> int:
    from .attach import AttachError, attach_socket, relay
    from .paths import UnsafePath

    def check_simulate() -> None:  # only a daemon attach starts uses it; the GPU catalog is a third of attach's imports
        from .gpu.catalog import SimulateSpecError, parse_simulate

        try:
            parse_simulate(args.simulate)
        except SimulateSpecError as exc:
            raise BadOption(str(exc)) from None

    problem = _check_interval(args.interval)
    if problem:
        return _fail(problem)
    serve_args = ["--seed", str(args.seed), "--interval", repr(args.interval), "--log-level", args.log_level]
    if args.simulate:
        serve_args += ["--simulate", args.simulate]
    if args.prometheus:
        serve_args += ["--prometheus", args.prometheus]
    try:
        for worker_id, url in parse_watched(args.watch_engine):
            serve_args += ["--watch-engine", "%s=%s" % (worker_id, url)]
    except ValueError as exc:
        return _fail(str(exc))
    try:
        socket_path, state_dir = _locations(args)
        serve_args += ["--log-file", os.path.join(state_dir, "agent.log")]
        sock, hello = attach_socket(
            socket_path, serve_args, state_dir, before_start=check_simulate, start=not args.no_start
        )
    except (BadOption, UnsafePath) as exc:
        return _fail(str(exc))
    except AttachError as exc:
        return _fail(str(exc), exc.exit_status)
    return relay(sock, sys.stdin.fileno(), sys.stdout.fileno(), preamble=hello)


def _inventory(args: argparse.Namespace) -> int:
    import json
    import logging

    from .gpu.catalog import SimulateSpecError
    from .machine import build_machine

    logging.basicConfig(level=logging.WARNING)
    try:
        machine = build_machine(args.simulate, args.seed)
    except SimulateSpecError as exc:
        return _fail(str(exc))
    try:
        inventory = machine.inventory()
    finally:
        machine.close()
    if args.json:
        sys.stdout.write(json.dumps(inventory, indent=2, sort_keys=True) + "\n")
        return 0
    label = " (simulated)" if inventory["simulated"] else ""
    sys.stdout.write(
        "%s%s: %d GPU(s), driver %s\n" % (inventory["hostname"], label, len(inventory["gpus"]), inventory["driver"])
    )
    for gpu in inventory["gpus"]:
        sys.stdout.write(
            "  GPU%d %s %d MiB %s\n"
            % (gpu["index"], gpu["name"], (gpu["memory_total_bytes"] or 0) >> 20, gpu["pci_bus_id"])
        )
    if inventory.get("gpu_reason"):
        sys.stdout.write("  no GPUs: %s\n" % inventory["gpu_reason"])
    for nic in inventory["nics"]:
        sys.stdout.write("  %s %s %s Gb/s %s\n" % (nic["name"], nic["kind"], nic["rate_gbps"], nic["state"]))
    return 0


def _version(args: argparse.Namespace) -> int:
    import json
    import platform

    from .protocol import PROTOCOL_VERSION

    if args.json:
        payload = {"agent": __version__, "protocol": PROTOCOL_VERSION, "python": platform.python_version()}
        sys.stdout.write(json.dumps(payload) + "\n")
    else:
        sys.stdout.write(
            "meshdeck-agent %s (protocol %d, Python %s)\n" % (__version__, PROTOCOL_VERSION, platform.python_version())
        )
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "simvllm":
        from .sim.vllm import main as simvllm_main

        return simvllm_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "attach":
        return _attach(args)
    if args.command == "inventory":
        return _inventory(args)
    if args.command == "version":
        return _version(args)
    if args.command == "capture-nvml":
        import logging

        from .gpu.capture import main as capture_main

        logging.basicConfig(level=logging.WARNING)
        return capture_main(args.out, max(1, args.reads), max(0.0, args.interval))
    if args.command == "keeper":
        from .keeper import run_keeper

        return run_keeper(args.worker_dir)
    build_parser().print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
