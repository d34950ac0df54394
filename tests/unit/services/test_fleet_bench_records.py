"""`bench fleet` takes the window's refresh and collection times from bounded records by count, so a window
longer than a record keeps the newest entries instead of slicing from a start index that has shifted."""

from __future__ import annotations

from collections import deque

from meshdeck.services.fleet_benchmark import since


def test_the_entries_added_since_a_count_are_the_records_tail() -> None:
    assert since(3, (5, [1.0, 2.0, 3.0, 4.0, 5.0])) == [4.0, 5.0]
    assert since(5, (5, [1.0, 2.0, 3.0, 4.0, 5.0])) == []
    assert since(0, (0, [])) == []


def test_a_record_that_dropped_its_oldest_still_gives_only_the_new_entries() -> None:
    kept: deque[float] = deque(maxlen=4)
    count = 0
    for value in range(10):  # 10 recorded, the last 4 kept
        kept.append(float(value))
        count += 1
    before = 7  # the window opened after the 7th
    assert since(before, (count, list(kept))) == [7.0, 8.0, 9.0]
    assert since(2, (count, list(kept))) == [6.0, 7.0, 8.0, 9.0]  # more added than kept: all that is kept
