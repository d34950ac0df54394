"""The `meshdeck` command line: `meshdeck plan`, `meshdeck hosts ...`, `meshdeck --demo`, ...

Subcommands live in `meshdeck.commands.<name>`; each module has `register(subparsers)` that adds
its parser and sets `func` (a callable taking the parsed namespace and returning an exit code).
Bad input raises `meshdeck.core.errors.InputError`; it is printed as one line on stderr naming the
field, with exit status 2. A reader that goes away (`meshdeck history export ... | head`) ends the
command quietly with status 141, 128 + SIGPIPE: what `cat` or `seq` report in the same pipeline, so a
script under `set -o pipefail` sees meshdeck exactly as it sees them.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import sys
from collections.abc import Sequence

from meshdeck import __version__, commands
from meshdeck.core.errors import InputError
from meshdeck.core.text import printable


def window_size(text: str) -> tuple[int, int]:
    """`--window-size 1920x1080` as (width, height): 640x480 up to 7680x4320 (an 8K screen)."""
    width, _, height = text.lower().partition("x")
    if not (width.isdigit() and height.isdigit()) or not (640 <= int(width) <= 7680 and 480 <= int(height) <= 4320):
        raise argparse.ArgumentTypeError(f"{text[:20]!r} is not WIDTHxHEIGHT between 640x480 and 7680x4320")
    return int(width), int(height)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="meshdeck",
        description="Plan, launch and watch DeepSeek 3.2 on your own GPU servers.",
    )
    parser.add_argument("--version", action="version", version=f"meshdeck {__version__}")
    parser.add_argument("--log-level", default="WARNING", help="logging level (default: WARNING)")
    parser.add_argument("--demo", action="store_true", help="open the console on two simulated 8xH200 hosts")
    parser.add_argument("--screenshots", metavar="DIR", help="with --demo: save one PNG per view into DIR")
    parser.add_argument(
        "--real-vllm",
        action="store_true",
        help="with --demo: also run a real vLLM (its CPU build, `make vllm-venv`) TP=2 on two real local agents",
    )
    parser.add_argument(
        "--window-size",
        type=window_size,
        default=(1500, 950),
        metavar="WxH",
        help="with --screenshots: the window's size (default 1500x950; the screen's where it is smaller)",
    )
    parser.add_argument("--quit-after", type=float, metavar="SECONDS", help="close the window after SECONDS")
    parser.add_argument("--db", metavar="PATH", help="SQLite database (default: the platform data dir)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"meshdeck.commands.{info.name}")
        register = getattr(module, "register", None)
        if callable(register):
            register(subparsers)
    return parser


_GLOBAL_OPTIONS_WITH_VALUE = ("--db", "--log-level")


def hoist_global_options(argv: Sequence[str]) -> list[str]:
    """Move `--db PATH` / `--log-level L` given after the subcommand to the front.

    argparse only accepts the main parser's options before the subcommand, but users write
    `meshdeck profiles list --db x.db` as often as `meshdeck --db x.db profiles list`.
    Nothing after a `--` is touched.
    """
    front: list[str] = []
    rest: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            rest.extend(argv[index:])
            break
        name = arg.split("=", 1)[0]
        if name in _GLOBAL_OPTIONS_WITH_VALUE:
            if "=" in arg:
                front.append(arg)
            elif index + 1 < len(argv):
                front.extend(argv[index : index + 2])
                index += 1
            else:
                rest.append(arg)  # let argparse report the missing value
        else:
            rest.append(arg)
        index += 1
    return front + rest


def chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The deepest subcommand parser `args` went through (`meshdeck hosts add` -> hosts' add parser)."""
    while True:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        name = getattr(args, sub.dest, None) if sub is not None else None
        if sub is None or not isinstance(name, str) or name not in sub.choices:
            return parser
        parser = sub.choices[name]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(hoist_global_options(sys.argv[1:] if argv is None else list(argv)))
    if extras:  # refused by the subcommand that was given them, with ITS usage (argparse would print meshdeck's)
        chosen_parser(parser, args).error(f"unrecognized arguments: {' '.join(extras)}")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    func = getattr(args, "func", None)
    if func is None:
        from meshdeck.console_entry import desktop_session, run_gui  # Qt is imported only when a window is wanted

        if args.demo or args.real_vllm or args.screenshots or args.quit_after is not None or desktop_session():
            return run_gui(args)  # a plain `meshdeck` on a desktop opens the console
        parser.print_help()
        return 0
    if getattr(args, "console", False) and "offscreen_console" in vars(args):
        from meshdeck.console_entry import offscreen_console  # Qt only for a command run with --console

        args.offscreen_console = offscreen_console
    try:
        return int(func(args) or 0)
    except InputError as exc:
        print(f"meshdeck: error: {printable(str(exc))}", file=sys.stderr)  # it may quote a file or a server
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE


EXIT_BROKEN_PIPE = 128 + 13  # SIGPIPE


def _quiet_stdout() -> None:
    """Point stdout at /dev/null when its reader is gone, so the interpreter's last flush at exit does not
    print 'Exception ignored ... BrokenPipeError'."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    else:
        return  # the broken pipe was another output (`-o FIFO`); stdout is fine
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a file descriptor (captured): nothing left to flush into a pipe
        pass
