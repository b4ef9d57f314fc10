"""The factory of stores: the database ``LmspApp.store_url`` names, SQLite or PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from .database import Database
from .store import Store


def open_store(url: str) -> Database:
    """The store at ``url``: ``sqlite:///relative/file``, ``sqlite:////absolute/file`` or
    ``postgresql://user@host:port/dbname`` (any libpq URL; a password and the other
    parameters may come from libpq's environment variables, ``PGPASSWORD`` and the rest)."""
    scheme = url.partition(":")[0].lower()
    if scheme == "sqlite":
        if not url.startswith("sqlite:///"):
            raise ValueError(f"a SQLite store URL is sqlite:///path, not {url!r}")
        return Store(Path(url.removeprefix("sqlite:///")).expanduser())
    if scheme in ("postgresql", "postgres"):
        try:
            from .postgres import PostgresStore
        except ImportError as exc:
            raise ValueError(
                f"a PostgreSQL store needs psycopg ({exc}): pip install 'lmsp-jupyter[postgresql]'"
            ) from None
        return PostgresStore(url)
    raise ValueError(f"unknown store URL scheme {scheme!r}: use sqlite:/// or postgresql://")
