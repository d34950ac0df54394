"""`bench fleet` takes a host COUNT as --host-count: every other command's --hosts takes host names
(`plan --hosts gpu-a,gpu-b`). The old `--hosts N` still works and says it is deprecated."""

from __future__ import annotations

import pytest
from meshdeck.cli import main

TOO_MANY = "--host-count: must be from 1 to 1000 (each host is two local agent processes), got 2000"
DEPRECATED = "meshdeck bench fleet: --hosts is deprecated (elsewhere --hosts takes host names); use --host-count"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        code = main(["bench", "fleet", *argv])
    except SystemExit as exit_:  # argparse's own refusals
        code = int(exit_.code or 0)
    return code, capsys.readouterr().err


def test_host_count_is_the_option_and_is_checked_before_anything_starts(capsys) -> None:
    code, err = _run(capsys, "--host-count", "2000")  # refused by the settings: no agent is started
    assert code == 2 and err == f"meshdeck: error: {TOO_MANY}\n"


def test_the_old_hosts_spelling_still_counts_and_says_it_is_deprecated(capsys) -> None:
    code, err = _run(capsys, "--hosts", "2000")
    assert code == 2 and err == f"{DEPRECATED}\nmeshdeck: error: {TOO_MANY}\n"


def test_a_run_without_a_count_names_host_count(capsys) -> None:
    code, err = _run(capsys)
    assert code == 2 and err.endswith(
        "meshdeck bench fleet: error: the following arguments are required: --host-count\n"
    )


def test_help_shows_host_count_only(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "fleet", "--help"])
    out = capsys.readouterr().out
    assert "--host-count N" in out and "--hosts" not in out
