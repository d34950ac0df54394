"""The SQLAlchemy Core tables that queries are composed from, read from the migrations, never written out.

The schema has one definition: the raw DDL of `migrations.py`. The migrations cannot be the copy — they
are history (a released step never changes, a later step ALTERs what an earlier one created) and they say
things a `Table` does not (WITHOUT ROWID, a partial index, the exact text SQLite keeps in sqlite_master).
So at import this module runs every migration on an empty in-memory database and reflects it with
SQLAlchemy (`MetaData.reflect`, a few milliseconds, once per process): columns, types, NOT NULL,
defaults, primary and foreign keys all come from the DDL, and a new migration reaches the queries
without anyone writing its columns a second time. The module names below only give each table a typed
name; a table missing from the migrations fails here, at import. The ingest fast path does not use these
tables (plain `executemany` on raw connections, ingest.py).
"""

from __future__ import annotations

import sqlite3

from sqlalchemy import MetaData, Table, create_engine
from sqlalchemy.pool import StaticPool

from meshdeck.store.migrations import apply_migrations


def _reflect_migrated_schema() -> MetaData:
    """The tables of a new database at the latest migration, as SQLAlchemy sees them."""
    connection = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    apply_migrations(connection)
    engine = create_engine("sqlite+pysqlite://", creator=lambda: connection, poolclass=StaticPool)
    try:
        reflected = MetaData()
        reflected.reflect(engine)
    finally:
        engine.dispose()
        connection.close()
    return reflected


metadata = _reflect_migrated_schema()


def _table(name: str) -> Table:
    return metadata.tables[name]


hosts = _table("hosts")
series = _table("series")
samples = _table("samples")
rollup_1m = _table("rollup_1m")
rollup_1h = _table("rollup_1h")
open_rollup_1m = _table("open_rollup_1m")
ingest_state = _table("ingest_state")
events = _table("events")
settings = _table("settings")
profiles = _table("profiles")
profile_versions = _table("profile_versions")
deployments = _table("deployments")
deployment_nodes = _table("deployment_nodes")
deployment_measurements = _table("deployment_measurements")
slurm_jobs = _table("slurm_jobs")
