"""One PNG of the console's planner with a model planned on a typed-in cluster: `resources/screenshots/planner-v4.png`.

The demo's screenshots (`make screenshots`) show what its tour plans (DeepSeek V3.2 on the simulated hosts, which
model vLLM 0.11: too old for V4). This opens the real console window on an empty database and fresh settings
(nothing of the user's is read or written), types the cluster into the planner form, plans as a user's click
does (the planner's job, off the GUI thread), selects a layout (`--row`: by its rank, the top by default) and
grabs the window once its memory bars and ranks are drawn. README's picture (`make screenshots` writes it to
screenshots/planner-v4.png) selects rank 4, whose larger KV pool shows V4's KV parts wide enough to see:

    xvfb-run -a -s "-screen 0 1600x1000x24" python packaging/planner_screenshot.py --row 4 \
        resources/screenshots/planner-v4.png
    python packaging/planner_screenshot.py --model deepseek-v4-flash --nodes 1 --window-size 1280x800 flash.png

Under `QT_QPA_PLATFORM=offscreen` it works as well (without the platform's window decorations and fonts).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from meshdeck.cli import window_size
from meshdeck.core.planner import PlanResult
from meshdeck.ui.app import application, build_context, build_views
from meshdeck.ui.main_window import MainWindow
from meshdeck.ui.theme import apply_theme
from meshdeck.ui.views.planner.view import PlannerView
from PySide6.QtCore import QEventLoop, QSettings, QTimer

PLAN_TIMEOUT_MS = 180_000
SETTLE_MS = 600


def _wait(milliseconds: int, until: Sequence[object] | None = None) -> None:
    """Run the event loop for `milliseconds`, or until `until` is not empty."""
    loop = QEventLoop()
    QTimer.singleShot(milliseconds, loop.quit)
    if until is not None:
        poll = QTimer()
        poll.timeout.connect(lambda: until and loop.quit())
        poll.start(50)
    loop.exec()


def shoot(args: argparse.Namespace, folder: Path) -> Path:
    app = application()
    apply_theme(app)
    settings = QSettings(str(folder / "console.ini"), QSettings.Format.IniFormat)
    context = build_context(argparse.Namespace(demo=False, db=str(folder / "console.db"), real_vllm=False), settings)
    try:
        window = MainWindow(context, build_views(context))
        window.fit_to_screen(*args.window_size)
        window.show()
        planner = window.view_of(PlannerView)
        window.show_view("planner")
        form = planner.form
        while not form.gpu.count():  # the GPU catalog is read by a job
            _wait(100)
        form.typed.setChecked(True)
        form.gpu.setCurrentText(args.gpu)
        if form.gpu.currentText() != args.gpu:
            raise SystemExit(f"planner_screenshot: no GPU {args.gpu!r} in the catalog")
        form.nodes.setValue(args.nodes)
        form.gpus_per_node.setValue(args.gpus_per_node)
        form.model.setCurrentText(args.model)
        planned: list[PlanResult] = []
        planner.planned.connect(planned.append)
        planner.plan()
        _wait(PLAN_TIMEOUT_MS, until=planned)
        if not planned:
            raise SystemExit(f"planner_screenshot: no plan: {form.error.text() or 'timed out'}")
        planner.table.selectRow(args.row - 1)
        planner.table.scrollToItem(planner.table.item(args.row - 1, 0))
        _wait(SETTLE_MS)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        if not window.grab().save(str(args.output), "PNG"):
            raise SystemExit(f"planner_screenshot: could not write {args.output}")
        window.close()
        return Path(args.output)
    finally:
        context.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path, help="the PNG to write")
    parser.add_argument("--model", default="deepseek-v4-pro")
    parser.add_argument("--gpu", default="H200-SXM-141GB")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--row", type=int, default=1, help="the layout to select, by its rank (default: the top)")
    parser.add_argument("--window-size", type=window_size, default=(1500, 950), metavar="WxH")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="meshdeck-shot-") as folder:
        written = shoot(args, Path(folder))
    sys.stdout.write(f"{written}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
