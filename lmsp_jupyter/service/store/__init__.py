"""The service's durable store, by room: the records it keeps (:mod:`.records`), the interface
of a database they are written through (:mod:`.interface`), its two backends (:mod:`.sqlite`,
:mod:`.postgres`), and :func:`open_store`, the database ``TaskStore.store_url`` names."""

from __future__ import annotations

from pathlib import Path

from .interface import Database
from .sqlite import SqliteStore


def open_store(url: str) -> Database:
    """The store at ``url``: ``sqlite:///relative/file``, ``sqlite:////absolute/file`` or
    ``postgresql://user@host:port/dbname`` (any libpq URL; a password and the other
    parameters may come from libpq's environment variables, ``PGPASSWORD`` and the rest)."""
    scheme = url.partition(":")[0].lower()
    if scheme == "sqlite":
        if not url.startswith("sqlite:///"):
            raise ValueError(f"a SQLite store URL is sqlite:///path, not {url!r}")
        return SqliteStore(Path(url.removeprefix("sqlite:///")).expanduser())
    if scheme in ("postgresql", "postgres"):
        try:
            from .postgres import PostgresStore
        except ImportError as exc:
            raise ValueError(
                f"a PostgreSQL store needs psycopg ({exc}): pip install 'lmsp-jupyter[postgresql]'"
            ) from None
        return PostgresStore(url)
    raise ValueError(f"unknown store URL scheme {scheme!r}: use sqlite:/// or postgresql://")
