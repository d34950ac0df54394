"""Fixtures for the services tests: a store in a temporary folder. Fakes of agents live in tests/fakes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from meshdeck.store.database import Database, open_database


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = open_database(tmp_path / "meshdeck.db")
    try:
        yield database
    finally:
        database.close()
