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
