"""The state database: SQLite in WAL mode, with a schema version and migrations.

One file, ``state.db``, owned by the daemon's single event-loop thread.
``PRAGMA synchronous=FULL``: every commit is fsynced, so a job transition or a
notification that was committed survives ``kill -9`` and power loss.  Structured
columns hold JSON text, so the file stays readable with the ``sqlite3`` shell.

The schema version lives in ``PRAGMA user_version``; the migrations (:func:`schema`:
the core's, :data:`CORE_MIGRATIONS`, and what each plugin declares of its tables) are
applied in order at open, each in its own transaction.  A database written by
a newer hermesd is refused rather than guessed at.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from hermesd import private

JSON_COLUMNS = {"toolsets", "pools", "spec", "trace", "data", "content", "artifacts", "result_data", "chain",
                "arguments"}

CORE_MIGRATIONS: dict[int, str] = {
    # 1: jobs and events (the plugins' first tables come with it: notifications, sessions, messages)
    1: """
    CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        exit_reason TEXT,
        parent TEXT,
        session TEXT,
        goal TEXT NOT NULL DEFAULT '',
        context TEXT,
        toolsets TEXT NOT NULL DEFAULT '[]',
        role TEXT NOT NULL DEFAULT 'leaf',
        model TEXT,
        provider TEXT,
        cwd TEXT,
        background INTEGER NOT NULL DEFAULT 0,
        depth INTEGER NOT NULL DEFAULT 0,
        pools TEXT NOT NULL DEFAULT '[]',
        spec TEXT NOT NULL DEFAULT '{}',
        summary TEXT,
        error TEXT,
        api_calls INTEGER NOT NULL DEFAULT 0,
        tokens_in INTEGER NOT NULL DEFAULT 0,
        tokens_out INTEGER NOT NULL DEFAULT 0,
        trace TEXT NOT NULL DEFAULT '[]',
        pid INTEGER,
        proc_start REAL,
        stop_reason TEXT,
        dispatched_at TEXT NOT NULL,
        started_at TEXT,
        completed_at TEXT,
        duration_seconds REAL
    );
    CREATE INDEX jobs_status ON jobs(status);
    CREATE INDEX jobs_parent ON jobs(parent);
    CREATE INDEX jobs_session ON jobs(session);
    CREATE TABLE events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        type TEXT NOT NULL,
        time TEXT NOT NULL,
        job TEXT,
        session TEXT,
        data TEXT NOT NULL DEFAULT '{}'
    )
    """,
    # 3: retention (hermesd.upkeep.retention) finds a job's first event without reading them all
    3: """
    CREATE INDEX events_job ON events(job, seq)
    """,
    # 4: daemon-wide settings an operator changes at run time (the queue's pause)
    4: """
    CREATE TABLE settings (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )
    """,
    # 6: jobs resumed after a restart (hermesd.resume): how often and when last; a submission's
    # idempotency key (hermesd.idempotency), unique while its job is kept
    6: """
    ALTER TABLE jobs ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN resumed_at TEXT;
    ALTER TABLE jobs ADD COLUMN idempotency_key TEXT;
    CREATE UNIQUE INDEX jobs_idempotency_key ON jobs(idempotency_key) WHERE idempotency_key IS NOT NULL
    """,
    # 7: the bill (hermesd.billing): what each job's model calls spent, kept when retention removes the job;
    # each job's cache tokens and cost beside its tokens_in/tokens_out
    7: """
    CREATE TABLE spend (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        time TEXT NOT NULL,
        day TEXT NOT NULL,
        job TEXT NOT NULL,
        kind TEXT,
        tree TEXT NOT NULL,
        tree_kind TEXT,
        session TEXT,
        provider TEXT,
        model TEXT,
        calls INTEGER NOT NULL DEFAULT 0,
        input INTEGER NOT NULL DEFAULT 0,
        output INTEGER NOT NULL DEFAULT 0,
        cache_write INTEGER NOT NULL DEFAULT 0,
        cache_read INTEGER NOT NULL DEFAULT 0,
        cost_usd REAL
    );
    CREATE INDEX spend_job ON spend(job);
    CREATE INDEX spend_tree ON spend(tree);
    CREATE INDEX spend_day ON spend(day);
    CREATE INDEX spend_session ON spend(session, day);
    ALTER TABLE jobs ADD COLUMN cache_write INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN cache_read INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN cost_usd REAL NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN cost_unknown INTEGER NOT NULL DEFAULT 0
    """,
}
"""The core's part of the schema: version number → its statements (``;``-separated)."""


def schema(*parts: Mapping[int, str]) -> list[str]:
    """The migrations of the whole schema from what the core and each plugin declare
    (:attr:`hermesd.plugin.Plugin.migrations`): ``parts`` are ``{version: statements}``;
    migration *N* (the one that brings a database to ``user_version`` *N*) is every part's
    statements for *N*, in the order given (the core first), and is empty where no part has
    any.  A version's statements are fixed once released: a database at version *N* has them
    all, so a new table is a new version, never an addition to an old one."""
    top = max((n for part in parts for n in part), default=0)
    return [";\n".join(part[n].strip().rstrip(";") for part in parts if n in part) for n in range(1, top + 1)]


class StoreError(Exception):
    """The state database cannot be opened or written (newer schema, disk full, read-only, locked).

    ``retryable``: the cause may pass (another process holds the write lock, the disk is
    full or read-only, an I/O error): the same write can succeed later
    (:mod:`hermesd.unwritable`)."""

    def __init__(self, message: str, retryable: bool = False):
        super().__init__(message)
        self.retryable = retryable


RETRYABLE_CODES = frozenset({5, 6, 8, 10, 13})
"""SQLite primary result codes of a write that may succeed later (https://sqlite.org/rescode.html):
``SQLITE_BUSY``, ``SQLITE_LOCKED``, ``SQLITE_READONLY``, ``SQLITE_IOERR``, ``SQLITE_FULL``."""

BUSY_TIMEOUT_MS = 200
"""How long one statement waits for another process's write lock (``PRAGMA busy_timeout``) before
it fails ``SQLITE_BUSY``: short, as the event loop waits with it; a request waits longer, between
attempts, off the loop's clock (:mod:`hermesd.unwritable`)."""


def _failed(path: Path, what: str, exc: sqlite3.Error) -> StoreError:
    """The :class:`StoreError` of ``exc`` (``what``: ``commit failed: `` or ''), retryable by its code."""
    code = getattr(exc, "sqlite_errorcode", None)  # set on what SQLite raised (Python 3.11+)
    return StoreError(f"state database {path}: {what}{exc}",
                      retryable=code & 0xFF in RETRYABLE_CODES if code is not None else isinstance(exc, sqlite3.OperationalError))


_EMPTY = {"[]": list, "{}": dict}
"""The commonest JSON column values, made without the parser (a fresh object each time)."""


def _decode_row(row: sqlite3.Row | None) -> dict[str, Any] | None:
    if row is None:
        return None
    out = dict(zip(row.keys(), row))
    for key in JSON_COLUMNS.intersection(out):
        value = out[key]
        if isinstance(value, str):
            empty = _EMPTY.get(value)
            out[key] = empty() if empty is not None else json.loads(value)
    return out


def _encode(key: str, value: Any) -> Any:
    if key in JSON_COLUMNS and value is not None and not isinstance(value, str):
        return json.dumps(value, separators=(",", ":"), default=str)
    return value


class Store:
    """The state database at ``path``, created with its parent directories (0700) and mode
    0600 from its first byte, as are its ``-wal``, ``-shm`` and ``-journal`` files
    (:mod:`hermesd.private`: the file is made before SQLite opens it, SQLite's own under umask 077)."""

    def __init__(self, path: str | Path, migrations: list[str] | None = None):
        self.path = Path(path)
        self.migrations = migrations if migrations is not None else schema(CORE_MIGRATIONS)
        self.version = len(self.migrations)
        """The schema version of this hermesd (``migrations``: :func:`schema`'s; None: the core's alone)."""
        try:
            with private.umask():
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                private.create_file(self.path)
                for suffix in ("-wal", "-shm", "-journal"):  # left by an earlier hermesd, maybe looser
                    if Path(f"{self.path}{suffix}").exists():
                        private.create_file(Path(f"{self.path}{suffix}"))
                self.db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
                self.db.row_factory = sqlite3.Row
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=FULL")
                self.db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
                self._migrate()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open state database {self.path}: {exc}") from None
        except OSError as exc:
            raise StoreError(f"cannot create state database {self.path}: {exc.strerror}") from None
        self._depth = 0
        self.commits = 0  # outermost transactions committed so far (a request that made none changed nothing)
        self._after: list[Callable[[], None]] = []
        self._memos: dict[str, tuple[int, Any]] = {}

    def _migrate(self) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > self.version:
            raise StoreError(f"{self.path} has schema version {version}, newer than this hermesd "
                             f"({self.version}); upgrade hermesd or use another HERMES_HOME")
        for number in range(version, self.version):
            # One script per version: execute() would keep each statement prepared in the
            # connection's cache (128 of them) for the daemon's life; executescript() does not.
            try:
                self.db.executescript(f"BEGIN IMMEDIATE;\n{self.migrations[number]};\n"
                                      f"PRAGMA user_version={number + 1};\nCOMMIT")
            except BaseException:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the current transaction has committed (at once outside one).

        Callbacks run in the order given, after the outermost ``COMMIT``; a
        rollback drops them.  This is how work that must follow durability
        (publishing an event, waking a waiter) stays correct when transactions
        nest.
        """
        if self._depth:
            self._after.append(callback)
        else:
            callback()

    def _run_after_commit(self) -> None:
        """Every pending callback, even when one raises (the first error is raised after)."""
        pending, self._after = self._after, []
        error: BaseException | None = None
        for callback in pending:
            try:
                callback()
            except BaseException as exc:  # noqa: BLE001 - re-raised below, once the rest has run
                error = error or exc
        if error is not None:
            raise error

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE`` … ``COMMIT``); nests by joining the outer one.

        Raises :class:`StoreError` when a statement in it or the commit fails (disk full,
        read-only, locked: ``retryable``); the transaction is then rolled back and the
        callbacks given to :meth:`after_commit` inside it are dropped.
        """
        if self._depth:
            self._depth += 1
            try:
                yield self.db
            finally:
                self._depth -= 1
            return
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise _failed(self.path, "", exc) from None
        self._depth = 1
        try:
            yield self.db
        except BaseException as exc:
            self._depth, self._after = 0, []
            if self.db.in_transaction:  # SQLite may have rolled back itself (disk full, I/O error)
                self.db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise _failed(self.path, "", exc) from None
            raise
        self._depth = 0
        try:
            self.db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._after = []
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise _failed(self.path, "commit failed: ", exc) from None
        self.commits += 1
        self._run_after_commit()

    # generic row helpers -------------------------------------------------

    def insert(self, table: str, row: dict[str, Any], *, replace: bool = False) -> int:
        """Insert ``row`` (JSON columns encoded); returns the rowid."""
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        verb = "INSERT OR REPLACE" if replace else "INSERT"
        with self.transaction() as db:
            cur = db.execute(f"{verb} INTO {table} ({cols}) VALUES ({marks})",
                             [_encode(k, v) for k, v in row.items()])
            return cur.lastrowid

    def update(self, table: str, key: str, key_value: Any, fields: dict[str, Any]) -> None:
        """``UPDATE table SET fields WHERE key = key_value``."""
        if not fields:
            return
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction() as db:
            db.execute(f"UPDATE {table} SET {sets} WHERE {key} = ?",
                       [_encode(k, v) for k, v in fields.items()] + [key_value])

    def one(self, sql: str, params: tuple | list = ()) -> dict[str, Any] | None:
        """First row of a query, decoded, or None."""
        return _decode_row(self.db.execute(sql, params).fetchone())

    def all(self, sql: str, params: tuple | list = ()) -> list[dict[str, Any]]:
        """All rows of a query, decoded."""
        return [_decode_row(r) for r in self.db.execute(sql, params).fetchall()]

    def memo(self, name: str, read: Callable[[], Any]) -> Any:
        """``read()``'s answer, read again only once this connection has written since the last
        read under ``name``.  A write is told by ``sqlite3_total_changes()`` (rows inserted,
        updated or deleted, also in a transaction later rolled back: then it is read again for
        nothing).  Sound because the daemon is the database's only writer while it runs (it
        holds the state directory's lock); a row changed by another process meanwhile is
        seen after the daemon's next write."""
        changes = self.db.total_changes
        held = self._memos.get(name)
        if held is not None and held[0] == changes:
            return held[1]
        value = read()
        self._memos[name] = (changes, value)
        return value

    def shrink_memory(self) -> None:
        """Give back the memory SQLite holds for this connection (its page cache:
        ``PRAGMA shrink_memory``, sqlite.org/pragma.html#pragma_shrink_memory); it reads
        pages again as it needs them."""
        try:
            self.db.execute("PRAGMA shrink_memory")
        except sqlite3.Error:
            pass

    def close(self) -> None:
        """Checkpoint the WAL and close."""
        try:
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:
            pass
        self.db.close()
