"""The PySide6 + pyqtgraph desktop console. The only package that imports Qt.

PySide6 is imported here, before any module of the package can import pyqtgraph, so pyqtgraph
always binds to PySide6 (it picks the first Qt binding already in `sys.modules`).
"""

import PySide6.QtCore  # noqa: F401  (must precede every pyqtgraph import)
