"""`--db` and `--log-level` work before or after the subcommand."""

from __future__ import annotations

from pathlib import Path

import pytest
from meshdeck.cli import hoist_global_options, main


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["profiles", "list", "--db", "x.db"], ["--db", "x.db", "profiles", "list"]),
        (["profiles", "list", "--db=x.db"], ["--db=x.db", "profiles", "list"]),
        (["--db", "x.db", "profiles", "list"], ["--db", "x.db", "profiles", "list"]),
        (["launch", "p.yaml", "--log-level", "info"], ["--log-level", "info", "launch", "p.yaml"]),
        (["bench", "x", "--", "--db", "kept"], ["bench", "x", "--", "--db", "kept"]),
    ],
)
def test_global_options_move_in_front_of_the_subcommand(argv: list[str], expected: list[str]) -> None:
    assert hoist_global_options(argv) == expected


def test_db_after_the_subcommand_is_the_database_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "history.db"
    assert main(["profiles", "list", "--db", str(db)]) == 0
    assert db.exists()
    assert "no profiles" in capsys.readouterr().out
