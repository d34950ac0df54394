"""Files meshdeck writes for the user (profile YAML, history exports): complete or not at all.

    with atomic_output("gpu-a.csv") as out:
        out.write(text)

A crash, a full disk or Ctrl-C mid-write leaves the previous file (or none), never half of one: the text
goes to a temporary file in the same folder, is fsynced, and is renamed over the target.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO


@contextmanager
def atomic_output(path: str | Path) -> Iterator[TextIO]:
    """A text file that appears at `path` complete or not at all (temp file in the same folder, renamed)."""
    target = Path(path)
    handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed below, before the rename
        "w", encoding="utf-8", newline="", dir=target.parent or ".", prefix=f".{target.name}.", delete=False
    )
    try:
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, target)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise
