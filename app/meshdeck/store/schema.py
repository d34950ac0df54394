"""SQLAlchemy Core descriptions of the tables `migrations.py` creates, for composing queries.

The migrations are the source of truth for the file; these mirror them (a test compares the two).
"""

from __future__ import annotations

from sqlalchemy import Column, Float, Integer, MetaData, Table, Text

metadata = MetaData()

hosts = Table(
    "hosts",
    metadata,
    Column("name", Text, primary_key=True),
    Column("target", Text, nullable=False),
    Column("port", Integer),
    Column("identity_file", Text),
    Column("jump", Text),
    Column("simulate", Text),
    Column("added_at", Float, nullable=False),
)

series = Table(
    "series",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("host", Text, nullable=False),
    Column("device", Text, nullable=False),
    Column("metric", Text, nullable=False),
    Column("labels", Text, nullable=False),
)

samples = Table(
    "samples",
    metadata,
    Column("series_id", Integer, primary_key=True),
    Column("ts", Integer, primary_key=True),
    Column("value", Float, nullable=False),
    sqlite_with_rowid=False,
)


def _rollup(name: str) -> Table:
    return Table(
        name,
        metadata,
        Column("series_id", Integer, primary_key=True),
        Column("bucket", Integer, primary_key=True),
        Column("vmin", Float, nullable=False),
        Column("vmax", Float, nullable=False),
        Column("vsum", Float, nullable=False),
        Column("n", Integer, nullable=False),
        sqlite_with_rowid=False,
    )


rollup_1m = _rollup("rollup_1m")
rollup_1h = _rollup("rollup_1h")

ingest_state = Table(
    "ingest_state",
    metadata,
    Column("host", Text, primary_key=True),
    Column("last_seq", Integer, nullable=False),
    Column("last_ts", Integer, nullable=False),
    Column("open_minute", Integer),
    Column("open_hour", Integer),
    Column("samples", Integer, nullable=False),
    Column("dropped", Integer, nullable=False),
    Column("updated_at", Float, nullable=False),
)

events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("ts", Float, nullable=False),
    Column("kind", Text, nullable=False),
    Column("host", Text),
    Column("subject", Text),
    Column("deployment_id", Integer),
    Column("data", Text, nullable=False),
)

settings = Table(
    "settings",
    metadata,
    Column("key", Text, primary_key=True),
    Column("value", Text, nullable=False),
)
