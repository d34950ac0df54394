"""The real-vLLM tests: vLLM's CPU build (from `make vllm-venv`) serving meshdeck's tiny DeepSeek-V3-shaped model.

`make test` makes the venv first, so under CI (CI=true) a missing vLLM is a failure, never a skip. A developer
who has not made it sees each test skip with the command that makes it.
"""

from __future__ import annotations

import os

import pytest
from meshdeck.services.vllm_local import VllmNotInstalled, find_vllm_executable


@pytest.fixture(scope="session")
def vllm_executable() -> str:
    try:
        return find_vllm_executable()
    except VllmNotInstalled as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the real-vLLM tests and `make test` makes their venv: {exc}")
        pytest.skip(str(exc))
