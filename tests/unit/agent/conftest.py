"""Agent unit tests import the hardware fakes from tests/fakes."""

from __future__ import annotations

import sys
from pathlib import Path

FAKES = str(Path(__file__).resolve().parents[2] / "fakes")
if FAKES not in sys.path:
    sys.path.insert(0, FAKES)
