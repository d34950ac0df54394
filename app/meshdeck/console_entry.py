"""Opens the console window: `meshdeck --demo [--real-vllm]`, `--screenshots DIR`, `--quit-after SECONDS`.

cli.py calls `run_gui` for those flags, and for a plain `meshdeck` in a desktop session (X11 or
Wayland; a terminal without a display still gets the help). Qt is
imported only here and below, so the rest of the CLI works on a server without any display.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from meshdeck.core.errors import InputError

if TYPE_CHECKING:
    from meshdeck.services.fleet_benchmark import ConsoleProbe


def desktop_session() -> bool:
    """A person's graphical session (X11 or Wayland): a plain `meshdeck` then opens the console.

    QT_QPA_PLATFORM alone does not count: test runs and CI set it without anyone watching."""
    return any(os.environ.get(name) for name in ("DISPLAY", "WAYLAND_DISPLAY"))


def has_display() -> bool:
    """A window can be shown: an X11 / Wayland display, or a Qt platform chosen explicitly."""
    return any(os.environ.get(name) for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"))


def run_gui(args: argparse.Namespace) -> int:
    if args.screenshots and not args.demo:
        print("meshdeck: error: --screenshots: only with --demo (it pictures the demo cluster)", file=sys.stderr)
        return 2
    if args.real_vllm and not args.demo:
        print("meshdeck: error: --real-vllm: only with --demo (it adds a real engine to the demo)", file=sys.stderr)
        return 2
    if args.quit_after is not None and not args.quit_after > 0:
        print(
            f"meshdeck: error: --quit-after: must be a positive number of seconds, got {args.quit_after}",
            file=sys.stderr,
        )
        return 2
    if not has_display():
        print(
            "meshdeck: error: no display: set DISPLAY (or run under xvfb-run), or QT_QPA_PLATFORM=offscreen "
            "for --screenshots",
            file=sys.stderr,
        )
        return 2
    try:
        from meshdeck.ui.app import run_console

        return run_console(args)
    except InputError as exc:
        print(f"meshdeck: error: {exc}", file=sys.stderr)
        return 2


def offscreen_console() -> ConsoleProbe:
    """The console's window offscreen beside a CLI measurement (`meshdeck bench fleet --console`)."""
    os.environ["QT_QPA_PLATFORM"] = "offscreen"  # a measurement never opens a window on the desktop
    from meshdeck.ui.fleet_benchmark import OffscreenConsole

    return OffscreenConsole()
