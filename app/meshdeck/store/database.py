"""Opening meshdeck's SQLite file: checked before anything is written, upgraded, tuned for one writer.

The data dir is 0700 and the database with its -wal and -shm files 0600 (private_files.py).
`open_database(path)` refuses (with `InputError`, the file left byte-for-byte untouched) a path that
is a directory, a file that is not SQLite, a damaged SQLite file, another program's database and a
database written by a newer meshdeck. Only then does it switch the file to WAL and apply the pending
migrations. Every connection runs `synchronous=NORMAL` (durable at each WAL checkpoint, never
corrupted by a crash) with a busy timeout, so the console reads while the writer thread writes.

A problem with the file or its disk met while opening or later (a full disk, a read-only folder, file or
mount, a damaged page) is one `InputError` naming the database and the cause (database_errors.py):
`read()`, `write()` and the writer's connection report it so, never as "is damaged" when it is not.

SQLAlchemy is used with the pysqlite driver's own transaction handling turned off: meshdeck emits
`BEGIN` itself (`BEGIN IMMEDIATE` for `Database.write()`), which makes DDL transactional and keeps a
read-then-write from failing with SQLITE_BUSY halfway through.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import platformdirs
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool, QueuePool

from meshdeck.core.errors import InputError
from meshdeck.store.database_errors import database_problem, file_problem, is_disk_full
from meshdeck.store.migrations import APPLICATION_ID, LATEST_VERSION, apply_migrations
from meshdeck.store.owned_paths import resolve_owned
from meshdeck.store.private_files import PRIVATE_FILE_MODE, create_private_file, make_private_dir, tighten

log = logging.getLogger(__name__)

SQLITE_MAGIC = b"SQLite format 3\x00"
BUSY_TIMEOUT_MS = 15_000
DATABASE_FILENAME = "meshdeck.db"
_BEGIN_OPTION = "meshdeck_begin"


def default_database_path() -> Path:
    """`meshdeck.db` in the per-user data directory (e.g. ~/.local/share/meshdeck on Linux)."""
    return platformdirs.user_data_path("meshdeck", appauthor=False) / DATABASE_FILENAME


def configure_connection(connection: sqlite3.Connection, *, cache_kib: int | None = None) -> None:
    """Per-connection settings every meshdeck connection runs with (the file-level WAL mode is set once)."""
    connection.isolation_level = None  # meshdeck issues BEGIN/COMMIT itself
    connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    connection.execute("PRAGMA synchronous = NORMAL")
    connection.execute("PRAGMA foreign_keys = ON")
    connection.execute("PRAGMA temp_store = MEMORY")
    if cache_kib is not None:
        connection.execute(f"PRAGMA cache_size = -{int(cache_kib)}")


def _field(path: Path) -> str:
    return f"database {path}"


def _untouched(problem: str) -> str:
    return f"{problem}; meshdeck left the file untouched — move it aside or pass --db PATH to use another file"


def _check_header(path: Path) -> bool:
    """True when the file exists with content; raises InputError when it cannot be meshdeck's database."""
    if path.is_dir():
        raise InputError(_field(path), "is a directory, not a database file; pass --db PATH to a file")
    if not path.exists():
        return False
    try:
        with path.open("rb") as handle:
            header = handle.read(100)
    except OSError as exc:
        raise InputError(_field(path), f"cannot be read ({exc.strerror})") from None
    if not header:
        return False  # an empty file is a new, empty SQLite database
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        raise InputError(
            _field(path), _untouched("is not an SQLite database (it does not start with 'SQLite format 3')")
        )
    return True


def _reader_without_shm(path: Path) -> sqlite3.Connection:
    """A connection that reads a WAL database without its -shm file: on a full disk SQLite cannot create or
    grow that file, and every ordinary connection, read-only ones included, fails at its first read. In
    EXCLUSIVE locking mode SQLite keeps the WAL index in its own memory instead (sqlite.org/wal.html,
    "Use of WAL Without Shared-Memory"); it holds the file's lock until it is closed, so each one serves
    one read. `query_only`: it writes nothing."""
    connection = sqlite3.connect(str(path), check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
    connection.execute("PRAGMA locking_mode = EXCLUSIVE")
    connection.execute("PRAGMA query_only = ON")
    return connection


def _probe(path: Path, *, without_shm: bool = False) -> tuple[int, int, list[str]]:
    """(application_id, user_version, table names), read through a read-only connection (`without_shm`:
    one that needs no -shm file, for a full disk)."""
    uri = path.resolve().as_uri() + "?mode=ro"
    try:
        if without_shm:
            connection = _reader_without_shm(path)
        else:
            connection = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error as exc:
        raise _OpenFailed(exc, "cannot be opened") from None
    try:
        application_id = connection.execute("PRAGMA application_id").fetchone()[0]
        user_version = connection.execute("PRAGMA user_version").fetchone()[0]
        tables = [
            row[0]
            for row in connection.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
    except sqlite3.Error as exc:  # a damaged file, or a folder, disk or mount it cannot be used in
        raise _OpenFailed(exc, "cannot be read") from None
    finally:
        connection.close()
    return int(application_id), int(user_version), tables


class _OpenFailed(Exception):
    """SQLite refused while opening: `open_database` decides between a read-only fallback and an InputError."""

    def __init__(self, error: sqlite3.Error, doing: str) -> None:
        super().__init__(str(error))
        self.error, self.doing = error, doing

    def input_error(self, path: Path) -> InputError:
        return InputError(_field(path), database_problem(self.error, path) or f"{self.doing} ({self.error})")


def _check_compatible(path: Path, application_id: int, user_version: int, tables: list[str]) -> None:
    if application_id != APPLICATION_ID and (tables or user_version):
        shown = ", ".join(tables[:6]) + (", ..." if len(tables) > 6 else "")
        raise InputError(_field(path), _untouched(f"is another program's SQLite database (tables: {shown or 'none'})"))
    if user_version > LATEST_VERSION:
        raise InputError(
            _field(path),
            _untouched(
                f"was written by a newer meshdeck (schema version {user_version}; this meshdeck reads up to "
                f"version {LATEST_VERSION}); upgrade meshdeck to open it"
            ),
        )


def _make_private(db_path: Path) -> None:
    """The database file created 0600 before SQLite creates it (its -wal and -shm then get that mode);
    an existing one, with its -wal and -shm, tightened to 0600. Only once the file passed the checks:
    a refused file is left exactly as it was."""
    try:
        if create_private_file(db_path):
            return
    except OSError as exc:
        raise InputError(_field(db_path), file_problem(exc, db_path)) from None
    for suffix in ("", "-wal", "-shm"):
        tighten(db_path.with_name(db_path.name + suffix), PRIVATE_FILE_MODE)


class Database:
    """An open meshdeck database: an SQLAlchemy engine plus dedicated raw connections for bulk ingest.

    `read_only` (opened on a full disk): why nothing can be written; reads go through connections that need
    no -shm file, one per read, and each write first tries to open the file as usual again (space may have
    been freed), raising that reason as an InputError while it cannot."""

    def __init__(self, path: Path, engine: Engine, schema_version: int, read_only: InputError | None = None) -> None:
        self.path = path
        self.engine = engine
        self.schema_version = schema_version
        self.read_only = read_only
        self._reopen_lock = threading.Lock()

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction: one consistent snapshot, never blocked by the writer (WAL)."""
        with self.usable(), self.engine.connect() as connection, connection.begin():
            yield connection

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction (BEGIN IMMEDIATE): committed on exit, rolled back whole on an exception."""
        self._writable()
        with self.usable(), self.engine.connect() as connection:
            connection.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"})
            with connection.begin():
                yield connection

    def raw_connection(self, *, cache_kib: int | None = None) -> sqlite3.Connection:
        """A new plain sqlite3 connection with meshdeck's settings, owned (and closed) by the caller."""
        self._writable()
        with self.usable():
            connection = sqlite3.connect(str(self.path), check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
            configure_connection(connection, cache_kib=cache_kib)
        return connection

    def _writable(self) -> None:
        """Nothing to do once opened as usual; opened read-only on a full disk, try the usual way again."""
        if self.read_only is None:
            return
        with self._reopen_lock:
            if self.read_only is None:
                return
            try:
                self.schema_version = _open_and_prepare(self.path)
            except _OpenFailed as failed:
                if is_disk_full(failed.error, self.path):
                    raise InputError(self.read_only.field, self.read_only.problem) from None
                raise failed.input_error(self.path) from None
            old, self.engine, self.read_only = self.engine, _make_engine(self.path), None
            old.dispose()
            log.info("%s: the disk has room again; the database is writable", self.path)

    @contextmanager
    def usable(self) -> Iterator[None]:
        """Turn an error about the file or its disk (full, read-only, damaged: database_errors.py) raised
        inside into one InputError naming the database; any other error passes as raised."""
        try:
            yield
        except (sqlite3.Error, DBAPIError) as exc:
            problem = self.problem(exc)
            if problem is None:
                raise
            raise problem from exc

    def problem(self, exc: BaseException) -> InputError | None:
        """The InputError for an error about the file or its disk, or None for another error."""
        text = database_problem(exc, self.path)
        return None if text is None else InputError(_field(self.path), text)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Database({str(self.path)!r}, schema_version={self.schema_version})"


def _make_engine(path: Path, *, without_shm: bool = False) -> Engine:
    """The engine of an open database; `without_shm` (a full disk): a connection per read that needs no
    -shm file (`_reader_without_shm`), closed after it so its exclusive lock is held only while it reads."""
    url = URL.create("sqlite+pysqlite", database=str(path))
    if without_shm:
        engine = create_engine(url, poolclass=NullPool, creator=lambda: _reader_without_shm(path))
    else:
        engine = create_engine(
            url,
            poolclass=QueuePool,
            pool_size=4,
            max_overflow=8,
            connect_args={"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000},
        )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        configure_connection(dbapi_connection)

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        mode = connection.get_execution_options().get(_BEGIN_OPTION, "DEFERRED")
        connection.exec_driver_sql(f"BEGIN {mode}")

    return engine


def _prepare(connection: sqlite3.Connection, db_path: Path) -> int:
    """WAL mode and migrations; returns the schema version. Retried while another process holds a lock:
    SQLite does not always call its busy handler here (switching to WAL, or a first schema read racing
    another process's CREATE), so two meshdeck processes opening a new file at once would otherwise fail."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause = 0.02
    while True:
        try:
            configure_connection(connection)
            mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                log.warning("%s: the file system refused WAL mode (got %s); reads will wait for writes", db_path, mode)
            return apply_migrations(connection)
        except sqlite3.OperationalError as exc:
            locked = "locked" in str(exc) or "busy" in str(exc)
            if not locked or time.monotonic() + pause > deadline:
                raise
            if connection.in_transaction:
                connection.rollback()
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


def _open_and_prepare(db_path: Path) -> int:
    """Open `db_path` as usual (creating its -wal and -shm), switch it to WAL and migrate it; the version."""
    try:
        connection = sqlite3.connect(str(db_path), timeout=BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error as exc:
        raise _OpenFailed(exc, "cannot be opened") from None
    try:
        return _prepare(connection, db_path)
    except sqlite3.Error as exc:
        raise _OpenFailed(exc, "cannot be prepared") from None
    finally:
        connection.close()


def open_database(path: str | Path | None = None) -> Database:
    """Open (creating or upgrading as needed) meshdeck's database; `None` means the platform data dir.

    A symlink on the way is followed only when it is the user's own (store/owned_paths.py), and a new
    database is created 0600 where it leads (a dangling link's target included). On a full disk an
    existing, current database opens read-only (`Database.read_only`): `profiles list`, `history hosts`
    and every other reading command work, and a write says the disk is full.

    Raises InputError naming the file when it cannot be used; in that case nothing was written to it.
    """
    given = default_database_path() if path is None else Path(path).expanduser()
    try:
        db_path = resolve_owned(given, field=_field(given)).path
    except OSError as exc:
        raise InputError(_field(given), f"cannot be reached ({exc.strerror})") from None
    try:
        make_private_dir(db_path.parent, tighten_existing=path is None)  # a folder the user named is theirs
    except OSError as exc:
        raise InputError(_field(db_path), f"its folder cannot be created ({exc.strerror})") from None
    exists = _check_header(db_path)
    try:
        if exists:
            _check_compatible(db_path, *_probe(db_path))
        _make_private(db_path)
        version = _open_and_prepare(db_path)
    except _OpenFailed as failed:
        if not (exists and is_disk_full(failed.error, db_path)):
            raise failed.input_error(db_path) from None
        return _open_read_only(db_path, failed.input_error(db_path))
    log.debug("opened %s at schema version %d", db_path, version)
    return Database(db_path, _make_engine(db_path), version)


def _open_read_only(db_path: Path, full: InputError) -> Database:
    """An existing database on a full disk, for reading: checked as usual through a connection that needs no
    -shm file. One that needs a migration cannot be opened (that is a write): `full` is raised."""
    try:
        application_id, user_version, tables = _probe(db_path, without_shm=True)
    except _OpenFailed as failed:
        raise (full if is_disk_full(failed.error, db_path) else failed.input_error(db_path)) from None
    _check_compatible(db_path, application_id, user_version, tables)
    if user_version != LATEST_VERSION:
        raise full
    log.info("%s: %s; opened read-only", db_path, full.problem)
    return Database(db_path, _make_engine(db_path, without_shm=True), user_version, read_only=full)
