"""What the daemon needs of sessions from its start, without the service (:mod:`hermesd.sessions.service`,
made at its first use: bench/README.md, the idle daemon's memory): the tables and the compaction's kind."""

from __future__ import annotations

COMPACT_KIND = "session_compact"
"""The kind of a compaction job (:mod:`hermesd.sessions.compaction`)."""

MIGRATIONS = {1: """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        title TEXT,
        origin TEXT,
        spec TEXT NOT NULL DEFAULT '{}',
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session TEXT NOT NULL,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        time TEXT NOT NULL,
        job TEXT,
        notification TEXT
    );
    CREATE INDEX messages_session ON messages(session, id);
    """,
    # each summary of a session's messages up to `upto` (a messages.id), the job that made it, and
    # the estimated tokens a turn was sent before and after (hermesd.sessions.compaction)
    8: """
    CREATE TABLE compactions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session TEXT NOT NULL,
        upto INTEGER NOT NULL,
        summary TEXT NOT NULL,
        job TEXT,
        tokens_before INTEGER NOT NULL,
        tokens_after INTEGER NOT NULL,
        time TEXT NOT NULL
    );
    CREATE INDEX compactions_session ON compactions(session, id)
    """}
"""The ``sessions`` and ``messages`` tables (schema version 1), ``compactions`` (8) (:func:`hermesd.store.schema`)."""
