"""Suite-wide test settings. Area fixtures live in the conftest.py of each test folder."""

from __future__ import annotations

import os

# Qt never needs a display in tests; screenshots under Xvfb set DISPLAY themselves.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
