"""Agent integration tests import the fakes (a hostile peer's input) from tests/fakes."""

from __future__ import annotations

import sys
from pathlib import Path

FAKES = str(Path(__file__).resolve().parents[2] / "fakes")
if FAKES not in sys.path:
    sys.path.insert(0, FAKES)
