"""An argument a subcommand does not take is refused by that subcommand, with its usage: `meshdeck plan ... --json`
once printed meshdeck's top-level usage, which lists no option of `plan`."""

from __future__ import annotations

import pytest
from meshdeck.cli import main


def _refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    assert exit_.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "prog", "extra"),
    [
        (["plan", "...", "--json"], "meshdeck plan", "..."),
        (["hosts", "add", "gpu-a", "10.0.0.5", "--bogus"], "meshdeck hosts add", "--bogus"),
        (["--db", "x.db", "profiles", "list", "stray"], "meshdeck profiles list", "stray"),
        (["bench", "fleet", "--host-count", "2", "extra"], "meshdeck bench fleet", "extra"),
    ],
)
def test_an_unknown_argument_prints_the_subcommands_usage(capsys, argv: list[str], prog: str, extra: str) -> None:
    err = _refused(capsys, *argv)
    assert err.startswith(f"usage: {prog} ")
    assert err.endswith(f"{prog}: error: unrecognized arguments: {extra}\n")


def test_an_unknown_top_level_option_keeps_the_top_level_usage(capsys) -> None:
    err = _refused(capsys, "--bogus")
    assert err.startswith("usage: meshdeck [-h]") and err.endswith("meshdeck: error: unrecognized arguments: --bogus\n")
