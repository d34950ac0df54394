"""The console raises its soft open-file limit (1,024 on most desktops) so a few hundred hosts' pipes fit."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

from meshdeck.remote.open_files import raise_open_files_limit

_CHILD = """
import json, os, resource, sys
from meshdeck.remote.open_files import raise_open_files_limit
before = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
result = raise_open_files_limit(int(sys.argv[1]))
opened = []
try:
    for _ in range(600):  # three pipes' worth per host for 100 hosts: more than the limit set below
        opened.extend(os.pipe())
except OSError as exc:
    print(json.dumps({"error": str(exc)}))
    raise SystemExit(0)
print(json.dumps({"before": before, "now": result.now, "soft": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                  "opened": len(opened)}))
"""


def _run(soft: int, wanted: int) -> dict[str, object]:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(wanted)], preexec_fn=lower, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_a_low_soft_limit_is_raised_so_more_descriptors_than_it_allowed_can_be_opened() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    wanted = 4096 if hard == resource.RLIM_INFINITY else min(4096, hard)
    result = _run(256, wanted)
    assert result["before"] == 256
    assert result["now"] == result["soft"] == wanted
    assert result["opened"] == 1200  # 256 would have stopped at ~250


def test_the_limit_is_never_lowered() -> None:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    result = raise_open_files_limit(16)
    assert result.now == soft == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
