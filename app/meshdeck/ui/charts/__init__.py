"""Live and history charts: numpy rings, units, and the pyqtgraph time chart widget."""
