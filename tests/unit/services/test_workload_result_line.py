"""A workload's result is the JSON object on its MESHDECK_RESULT line; what its log says is not trusted."""

from __future__ import annotations

import pytest
from meshdeck.services.deployments.local import RESULT_MARK, result_line


def test_the_result_is_the_object_on_the_result_line():
    logs = {"rank0": "starting\n" + RESULT_MARK + '{"matches_reference": true, "tokens": 8}\n', "rank1": "done\n"}
    assert result_line(logs) == {"matches_reference": True, "tokens": 8}


@pytest.mark.parametrize("payload", ["{cut off", "[1, 2]", "42", '"text"', "null"])
def test_a_result_line_that_is_not_a_json_object_is_no_result(payload):
    # the log comes from a server: a line cut short or a workload printing something else there must not
    # raise out of the run (or hand a list to what reads the result as a mapping)
    assert result_line({"rank0": RESULT_MARK + payload + "\n"}) is None


def test_a_malformed_result_line_does_not_hide_a_later_good_one():
    logs = {"rank0": RESULT_MARK + "{cut off\n", "rank1": RESULT_MARK + '{"ok": 1}\n'}
    assert result_line(logs) == {"ok": 1}
