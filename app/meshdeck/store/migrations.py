"""The database schema as an ordered list of migration steps, applied in one transaction each.

These raw DDL statements are the one definition of the schema: the SQLAlchemy tables the queries use are
reflected from them (schema.py), and tests/fixtures/store pins the `sqlite_master` they produce.

`PRAGMA user_version` holds the number of the last step applied and `PRAGMA application_id` marks the
file as meshdeck's. A step is never edited once released: a schema change is a new step at the end, so
a database written by any older meshdeck is upgraded in place and one from a newer meshdeck (a
user_version above `LATEST_VERSION`) is refused by `database.open_database` before anything is written.

Time is stored as integer milliseconds since the Unix epoch in the sample and rollup tables (exact
equality for the primary key and the rollup buckets, and a 6-byte varint on disk) and as REAL Unix
seconds elsewhere.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

APPLICATION_ID = 0x6D736864  # b"mshd": PRAGMA application_id of every meshdeck database


@dataclass(frozen=True)
class Migration:
    version: int
    summary: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "hosts added by the operator",
        (
            """CREATE TABLE hosts (
                name TEXT NOT NULL PRIMARY KEY,
                target TEXT NOT NULL,
                port INTEGER CHECK (port IS NULL OR port BETWEEN 1 AND 65535),
                identity_file TEXT,
                jump TEXT,
                simulate TEXT,
                added_at REAL NOT NULL
            )""",
        ),
    ),
    Migration(
        2,
        "metric history: series, raw samples, 1-minute and 1-hour rollups, ingest positions, events, settings",
        (
            # One row per (host, device, metric, labels); ids are handed out in order of first sight, so
            # one host's series are neighbours in the sample table's key space.
            """CREATE TABLE series (
                id INTEGER PRIMARY KEY,
                host TEXT NOT NULL,
                device TEXT NOT NULL,
                metric TEXT NOT NULL,
                labels TEXT NOT NULL DEFAULT '',
                UNIQUE (host, device, metric, labels)
            )""",
            """CREATE TABLE samples (
                series_id INTEGER NOT NULL,
                ts INTEGER NOT NULL,
                value REAL NOT NULL,
                PRIMARY KEY (series_id, ts)
            ) WITHOUT ROWID""",
            """CREATE TABLE rollup_1m (
                series_id INTEGER NOT NULL,
                bucket INTEGER NOT NULL,
                vmin REAL NOT NULL,
                vmax REAL NOT NULL,
                vsum REAL NOT NULL,
                n INTEGER NOT NULL,
                PRIMARY KEY (series_id, bucket)
            ) WITHOUT ROWID""",
            """CREATE TABLE rollup_1h (
                series_id INTEGER NOT NULL,
                bucket INTEGER NOT NULL,
                vmin REAL NOT NULL,
                vmax REAL NOT NULL,
                vsum REAL NOT NULL,
                n INTEGER NOT NULL,
                PRIMARY KEY (series_id, bucket)
            ) WITHOUT ROWID""",
            # Per host: the last sample committed (the fleet resumes from last_seq after a restart) and the
            # minute / hour buckets still open (not yet rolled up; queries read those from the finer tier).
            """CREATE TABLE ingest_state (
                host TEXT NOT NULL PRIMARY KEY,
                last_seq INTEGER NOT NULL,
                last_ts INTEGER NOT NULL,
                open_minute INTEGER,
                open_hour INTEGER,
                samples INTEGER NOT NULL DEFAULT 0,
                dropped INTEGER NOT NULL DEFAULT 0,
                updated_at REAL NOT NULL
            )""",
            """CREATE TABLE events (
                id INTEGER PRIMARY KEY,
                ts REAL NOT NULL,
                kind TEXT NOT NULL,
                host TEXT,
                subject TEXT,
                deployment_id INTEGER,
                data TEXT NOT NULL DEFAULT '{}'
            )""",
            "CREATE INDEX events_by_ts ON events (ts)",
            "CREATE INDEX events_by_host ON events (host, ts)",
            "CREATE INDEX events_by_deployment ON events (deployment_id, ts) WHERE deployment_id IS NOT NULL",
            "CREATE TABLE settings (key TEXT NOT NULL PRIMARY KEY, value TEXT NOT NULL)",
        ),
    ),
    Migration(
        3,
        "deployment profiles with every edit kept as a version; deployments with their plan and measurements",
        (
            """CREATE TABLE profiles (
                id INTEGER PRIMARY KEY,
                name TEXT NOT NULL UNIQUE,
                current_version INTEGER NOT NULL,
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL
            )""",
            # `yaml` is the text exactly as imported or saved (export gives it back byte for byte);
            # `data` is the validated profile as canonical JSON, for listing and comparing.
            """CREATE TABLE profile_versions (
                profile_id INTEGER NOT NULL REFERENCES profiles (id) ON DELETE CASCADE,
                version INTEGER NOT NULL,
                yaml TEXT NOT NULL,
                data TEXT NOT NULL,
                note TEXT NOT NULL DEFAULT '',
                created_at REAL NOT NULL,
                PRIMARY KEY (profile_id, version)
            )""",
            # `key` is the id the deploy service gave the deployment (also in its workers' names).
            """CREATE TABLE deployments (
                id INTEGER PRIMARY KEY,
                key TEXT NOT NULL UNIQUE,
                name TEXT NOT NULL,
                engine TEXT NOT NULL,
                model TEXT NOT NULL DEFAULT '',
                profile_name TEXT,
                profile_version INTEGER,
                profile_yaml TEXT,
                plan TEXT NOT NULL DEFAULT '{}',
                planned TEXT,
                state TEXT NOT NULL,
                reason TEXT NOT NULL DEFAULT '',
                started_at REAL NOT NULL,
                finished_at REAL,
                workers TEXT NOT NULL DEFAULT '[]'
            )""",
            "CREATE INDEX deployments_by_start ON deployments (started_at)",
            """CREATE TABLE deployment_nodes (
                deployment_id INTEGER NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
                position INTEGER NOT NULL,
                host TEXT NOT NULL,
                name TEXT NOT NULL,
                role TEXT NOT NULL,
                stage INTEGER NOT NULL,
                argv TEXT NOT NULL,
                env TEXT NOT NULL,
                PRIMARY KEY (deployment_id, position)
            )""",
            """CREATE TABLE deployment_measurements (
                deployment_id INTEGER NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
                worker TEXT NOT NULL,
                measured TEXT NOT NULL,
                measured_at REAL NOT NULL,
                PRIMARY KEY (deployment_id, worker)
            )""",
        ),
    ),
)

MIGRATIONS += (
    Migration(
        4,
        "the sequence epoch of each host's resume point (an agent on a new state dir counts seq from 1 again)",
        ("ALTER TABLE ingest_state ADD COLUMN seq_epoch TEXT",),
    ),
)

MIGRATIONS += (
    Migration(
        5,
        "fleet-sized history: per-link series kept as 1-minute rollups (their open minute in open_rollup_1m) "
        "and each host's raw row count (the raw tier's size budget is enforced from it)",
        (
            # The open minute of each rollup-only series (per-link NVLink): one row per series, replaced at
            # every commit, moved to rollup_1m when the minute closes. Same columns as rollup_1m, so the
            # queries read it as the finest tier of those series.
            """CREATE TABLE open_rollup_1m (
                series_id INTEGER NOT NULL PRIMARY KEY,
                bucket INTEGER NOT NULL,
                vmin REAL NOT NULL,
                vmax REAL NOT NULL,
                vsum REAL NOT NULL,
                n INTEGER NOT NULL
            )""",
            "ALTER TABLE ingest_state ADD COLUMN raw_rows INTEGER NOT NULL DEFAULT 0",
            """UPDATE ingest_state SET raw_rows = (
                SELECT count(*) FROM samples
                WHERE samples.series_id IN (SELECT id FROM series WHERE series.host = ingest_state.host)
            )""",
        ),
    ),
)

MIGRATIONS += (
    Migration(
        6,
        "each host's Prometheus exporter address (HOST:PORT), passed to its agent as `attach --prometheus`",
        ("ALTER TABLE hosts ADD COLUMN prometheus TEXT",),
    ),
)

MIGRATIONS += (
    Migration(
        7,
        "Slurm: a host may be a cluster's login node (scheduler, and the SSH port of its compute nodes), and the "
        "jobs meshdeck submitted there (one row per deployment: its job, where its output goes, the states seen)",
        (
            "ALTER TABLE hosts ADD COLUMN scheduler TEXT CHECK (scheduler IS NULL OR scheduler = 'slurm')",
            "ALTER TABLE hosts ADD COLUMN node_port INTEGER CHECK (node_port IS NULL OR node_port BETWEEN 1 AND 65535)",
            """CREATE TABLE slurm_jobs (
                deployment TEXT NOT NULL PRIMARY KEY,
                cluster TEXT NOT NULL,
                job_id INTEGER NOT NULL,
                profile TEXT NOT NULL,
                engine TEXT NOT NULL,
                submitted_at REAL NOT NULL,
                nodes INTEGER NOT NULL,
                options TEXT NOT NULL DEFAULT '{}',
                output TEXT,
                serving_port INTEGER,
                state TEXT NOT NULL,
                reason TEXT,
                states_seen TEXT NOT NULL DEFAULT '[]',
                node_names TEXT NOT NULL DEFAULT '[]',
                updated_at REAL NOT NULL,
                ended_at REAL
            )""",
            "CREATE INDEX slurm_jobs_by_cluster ON slurm_jobs (cluster, job_id)",
        ),
    ),
)

LATEST_VERSION = MIGRATIONS[-1].version


def apply_migrations(connection: sqlite3.Connection, *, target: int = LATEST_VERSION) -> int:
    """Bring the database up to `target`, one transaction per step; returns the version reached.

    Each step re-reads user_version under the write lock (BEGIN IMMEDIATE), so two processes opening
    the same new file at once apply every step exactly once. A failing step is rolled back whole.
    """
    for step in MIGRATIONS:
        if step.version > target:
            break
        connection.execute("BEGIN IMMEDIATE")
        try:
            current = connection.execute("PRAGMA user_version").fetchone()[0]
            if current >= step.version:
                connection.execute("ROLLBACK")
                continue
            for statement in step.statements:
                connection.execute(statement)
            connection.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            connection.execute(f"PRAGMA user_version = {step.version}")
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
    return int(connection.execute("PRAGMA user_version").fetchone()[0])
