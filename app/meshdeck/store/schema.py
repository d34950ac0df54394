"""SQLAlchemy Core descriptions of the tables `migrations.py` creates, for composing queries.

The migrations are the source of truth for the file; these mirror them (a test compares the two).
"""

from __future__ import annotations

from sqlalchemy import Column, Float, ForeignKey, Integer, MetaData, Table, Text

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
    Column("seq_epoch", Text),  # the agent's sequence epoch last_seq belongs to (NULL: not known)
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

profiles = Table(
    "profiles",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", Text, nullable=False, unique=True),
    Column("current_version", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

profile_versions = Table(
    "profile_versions",
    metadata,
    Column("profile_id", Integer, ForeignKey("profiles.id", ondelete="CASCADE"), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("yaml", Text, nullable=False),
    Column("data", Text, nullable=False),
    Column("note", Text, nullable=False),
    Column("created_at", Float, nullable=False),
)

deployments = Table(
    "deployments",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("key", Text, nullable=False, unique=True),
    Column("name", Text, nullable=False),
    Column("engine", Text, nullable=False),
    Column("model", Text, nullable=False),
    Column("profile_name", Text),
    Column("profile_version", Integer),
    Column("profile_yaml", Text),
    Column("plan", Text, nullable=False),
    Column("planned", Text),
    Column("state", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("started_at", Float, nullable=False),
    Column("finished_at", Float),
    Column("workers", Text, nullable=False),
)

deployment_nodes = Table(
    "deployment_nodes",
    metadata,
    Column("deployment_id", Integer, ForeignKey("deployments.id", ondelete="CASCADE"), primary_key=True),
    Column("position", Integer, primary_key=True),
    Column("host", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("role", Text, nullable=False),
    Column("stage", Integer, nullable=False),
    Column("argv", Text, nullable=False),
    Column("env", Text, nullable=False),
)

deployment_measurements = Table(
    "deployment_measurements",
    metadata,
    Column("deployment_id", Integer, ForeignKey("deployments.id", ondelete="CASCADE"), primary_key=True),
    Column("worker", Text, primary_key=True),
    Column("measured", Text, nullable=False),
    Column("measured_at", Float, nullable=False),
)
