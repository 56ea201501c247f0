"""What the daemon needs of Kanban from its start, before any board is used: the board's
tables (:data:`MIGRATIONS`, applied when the state database opens) and the workers' job kind
(:data:`WORKER_KIND`).  A leaf: the board (:mod:`hermesd.kanban.board`) and its dispatcher
(:mod:`hermesd.kanban.dispatcher`) are imported only once a board is used
(:class:`hermesd.kanban.ops.KanbanPlugin`), so an idle daemon without tasks holds neither."""

from __future__ import annotations

WORKER_KIND = "kanban_worker"
"""The job kind of a task's worker."""

MIGRATIONS = {2: """
    CREATE TABLE kanban_tasks (
        num INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT GENERATED ALWAYS AS ('kb_' || num) STORED,
        board TEXT NOT NULL DEFAULT 'default',
        title TEXT NOT NULL,
        body TEXT NOT NULL DEFAULT '',
        assignee TEXT NOT NULL,
        priority INTEGER NOT NULL DEFAULT 0,
        status TEXT NOT NULL,
        cwd TEXT,
        result TEXT,
        artifacts TEXT NOT NULL DEFAULT '[]',
        block_reason TEXT,
        created_by TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        completed_at TEXT,
        claimed_by TEXT,
        claimed_at TEXT,
        heartbeat_at TEXT,
        last_worker TEXT,
        attempts INTEGER NOT NULL DEFAULT 0,
        failures INTEGER NOT NULL DEFAULT 0,
        last_error TEXT
    );
    CREATE UNIQUE INDEX kanban_tasks_id ON kanban_tasks(id);
    CREATE INDEX kanban_tasks_status ON kanban_tasks(status, board);
    CREATE INDEX kanban_tasks_claim ON kanban_tasks(claimed_by);
    CREATE TABLE kanban_links (
        parent TEXT NOT NULL,
        child TEXT NOT NULL,
        PRIMARY KEY (parent, child)
    );
    CREATE INDEX kanban_links_child ON kanban_links(child);
    CREATE TABLE kanban_comments (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        task TEXT NOT NULL,
        author TEXT NOT NULL,
        text TEXT NOT NULL,
        time TEXT NOT NULL
    );
    CREATE INDEX kanban_comments_task ON kanban_comments(task, id)
    """, 9: """
    ALTER TABLE kanban_tasks ADD COLUMN idempotency_key TEXT;
    CREATE UNIQUE INDEX kanban_tasks_idempotency_key ON kanban_tasks(idempotency_key)
        WHERE idempotency_key IS NOT NULL
    """}
"""The board's tables: ``kanban_tasks``, ``kanban_links``, ``kanban_comments`` (schema version 2,
:func:`hermesd.store.schema`); a task's ``idempotency_key`` (version 9: the ``kanban.create`` that
made it, :mod:`hermesd.idempotency`), unique while the task is kept."""
