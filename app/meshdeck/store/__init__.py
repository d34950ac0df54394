"""SQLite history and profiles through SQLAlchemy 2: schema, migrations, ingest, rollups, retention."""
