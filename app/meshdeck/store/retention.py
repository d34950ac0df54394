"""How long each resolution of history is kept, and the deletion that enforces it.

Defaults: raw samples 7 days, 1-minute rollups 90 days, 1-hour rollups forever, and no size budget for
the raw tier. The policy lives in the `settings` table so the CLI and the console change it for the
writer. Deletion walks the series one by one (`series_id = ? AND ts < ?` is a seek on the primary key,
where a bare `ts < ?` would scan the whole table) in short transactions, so readers and the writer are
never held up for long; each transaction also takes the rows it deleted off their hosts' `raw_rows`.

`raw_max_bytes` bounds the raw tier (a 278-host fleet writes ~37,000 rows a second; 7 days of that is
hundreds of GB): once the raw tier is over it, its oldest samples go first (raw_tier.py), the rollups stay.
"""

from __future__ import annotations

import itertools
import json
import math
import sqlite3
from dataclasses import asdict, dataclass

from sqlalchemy import select
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from meshdeck.core.errors import InputError
from meshdeck.store import schema
from meshdeck.store.database import Database
from meshdeck.store.raw_tier import delete_raw_before, enforce_raw_budget, raw_series

DAY_S = 86_400.0
MIN_RAW_BYTES = 1024**2  # a budget below a few seconds of a fleet's writes is a typo
_SETTINGS_KEY = "retention"
_FIELDS = ("raw_days", "minute_days", "hour_days", "raw_max_bytes")


@dataclass(frozen=True)
class RetentionPolicy:
    """Days kept per tier; None keeps a tier forever. A finer tier is never kept longer than a coarser one."""

    raw_days: float | None = 7.0
    minute_days: float | None = 90.0
    hour_days: float | None = None
    raw_max_bytes: int | None = None  # the raw tier's size budget; None: bounded by raw_days alone

    def __post_init__(self) -> None:
        budget = self.raw_max_bytes
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
            raise InputError("retention.raw_max_bytes", f"{budget!r} must be a whole number of bytes or null (none)")
        if budget is not None and budget < MIN_RAW_BYTES:
            raise InputError("retention.raw_max_bytes", f"{budget} bytes is below the minimum of 1 MiB")
        minimum = {"raw_days": 1 / 24, "minute_days": 1.0, "hour_days": 1.0}
        for name, smallest in minimum.items():
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise InputError(f"retention.{name}", f"{value!r} must be a number of days or null (forever)")
            if value < smallest:
                raise InputError(f"retention.{name}", f"{value!r} days is below the minimum of {smallest:g}")
        order = [("raw_days", self.raw_days), ("minute_days", self.minute_days), ("hour_days", self.hour_days)]
        for (fine_name, fine), (coarse_name, coarse) in itertools.pairwise(order):
            fine_days = math.inf if fine is None else fine
            coarse_days = math.inf if coarse is None else coarse
            if fine_days > coarse_days:
                raise InputError(
                    f"retention.{fine_name}",
                    f"keeps {fine_name.split('_')[0]} data longer than {coarse_name} ({fine} > {coarse} days)",
                )

    def cutoffs_ms(self, now_s: float) -> dict[str, int | None]:
        """Per table: rows with a time (or bucket start) before this many ms are deleted; None keeps all."""

        def cutoff(days: float | None) -> int | None:
            return None if days is None else int((now_s - days * DAY_S) * 1000)

        return {
            "samples": cutoff(self.raw_days),
            "rollup_1m": cutoff(self.minute_days),
            "rollup_1h": cutoff(self.hour_days),
        }


def load_policy(db: Database) -> RetentionPolicy:
    with db.read() as connection:
        value = connection.execute(
            select(schema.settings.c.value).where(schema.settings.c.key == _SETTINGS_KEY)
        ).scalar()
    if value is None:
        return RetentionPolicy()
    data = json.loads(value)
    return RetentionPolicy(**{k: data.get(k) for k in _FIELDS})


def save_policy(db: Database, policy: RetentionPolicy) -> None:
    statement = sqlite_insert(schema.settings).values(key=_SETTINGS_KEY, value=json.dumps(asdict(policy)))
    statement = statement.on_conflict_do_update(index_elements=["key"], set_={"value": statement.excluded.value})
    with db.write() as connection:
        connection.execute(statement)


@dataclass(frozen=True)
class RetentionResult:
    samples: int
    rollup_1m: int
    rollup_1h: int
    over_budget: int = 0  # raw samples deleted (of the `samples` above) to bring the raw tier under its budget


def apply_retention(
    connection: sqlite3.Connection, policy: RetentionPolicy, now_s: float, *, series_per_transaction: int = 512
) -> RetentionResult:
    """Delete what the policy no longer keeps. Runs its own short transactions on a raw connection."""
    series = raw_series(connection)
    series_ids = [series_id for _, series_id in series]
    deleted: dict[str, int] = {}
    for table, cutoff in policy.cutoffs_ms(now_s).items():
        deleted[table] = 0
        if cutoff is None:
            continue
        if table == "samples":
            deleted[table] = delete_raw_before(connection, series, cutoff, series_per_transaction)
            continue
        statement = f"DELETE FROM {table} WHERE series_id = ? AND bucket < ?"
        for start in range(0, len(series_ids), series_per_transaction):
            chunk = series_ids[start : start + series_per_transaction]
            connection.execute("BEGIN IMMEDIATE")
            try:
                before = connection.total_changes
                connection.executemany(statement, [(series_id, cutoff) for series_id in chunk])
                deleted[table] += connection.total_changes - before
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
    over_budget = 0
    if policy.raw_max_bytes is not None:
        over_budget = enforce_raw_budget(
            connection, policy.raw_max_bytes, series_per_transaction=series_per_transaction
        )
    return RetentionResult(deleted["samples"] + over_budget, deleted["rollup_1m"], deleted["rollup_1h"], over_budget)
