"""The PySide6 + pyqtgraph desktop console. The only package that imports Qt."""
