"""``checkpoint.json``: what a batch run has settled, for resume.

Shape (written atomically, fsynced; see ``batch.job.SAVE_EVERY`` for when); the keys of
Hermes Agent's batch_runner.py checkpoint come first, with its meanings::

    {"run_name": str,
     "completed_prompts": [indices never to run again: written or discarded],   # Hermes
     "batch_stats": {"N": {"processed", "skipped", "discarded_no_reasoning"}},    # Hermes
     "last_updated": str,                                                         # Hermes
     "version": 1, "job": str, "settings": {...},
     "total_prompts": int, "bad_lines": int,
     "line_digests": [a fingerprint of each dataset line, batch.dataset.line_digest],
     "done": [prompt indices with a line in a batch file],
     "discarded": {"INDEX": {"reason": "no_reasoning"|"invalid_tool_calls", "error", "api_calls", "tokens",
                             "duration_seconds", "completed_at"}},
     "failed": {"INDEX": {"error", "status", "attempts", "api_calls", "tokens",
                          "completed_at"}},
     "active_seconds": float, "updated_at": str, "finished": bool}

The batch files are the durable truth for ``done``: a line is appended and
fsynced before the checkpoint names it, so on opening a run ``done`` is rebuilt
from the files (a crash between the two loses nothing and runs nothing twice).
``batch_stats`` counts, per batch file number, the prompts settled since this
daemon opened the run (``processed``), those settled before (``skipped``) and
the discarded ones.  ``discarded`` lives only here — it is written before the prompt counts as
settled, so a crash first just runs that prompt again.  ``failed`` prompts are
run again by the next resume; a prompt that later succeeds leaves ``failed``.
A prompt is known by its line's position, so ``line_digests`` says which lines
ran: a resume over a dataset changed in place (lines moved, one removed) would
mix prompts up, and is refused naming the first changed line.
"""

from __future__ import annotations

from collections import Counter

import json
from pathlib import Path
from typing import Any

from batch import files
from hermesd import clock

NAME = "checkpoint.json"
VERSION = 1


class CheckpointError(Exception):
    """``checkpoint.json`` exists but cannot be read or is not a checkpoint (the message names the file)."""


class Checkpoint:
    """The checkpoint of the run in ``run_dir``; see the module doc for the fields."""

    def __init__(self, run_dir: Path, data: dict[str, Any] | None = None):
        self.path = run_dir / NAME
        data = data or {}
        self.settings: dict[str, Any] = dict(data.get("settings") or {})
        self.run_name = str(data.get("run_name") or "")
        self.job = str(data.get("job") or "")
        self.total_prompts = int(data.get("total_prompts") or 0)
        self.bad_lines = int(data.get("bad_lines") or 0)
        self.line_digests: list[str] = [str(d) for d in data.get("line_digests") or []]
        self.done: set[int] = {int(i) for i in data.get("done") or []}
        self.discarded: dict[int, dict[str, Any]] = {int(k): v for k, v in (data.get("discarded") or {}).items()}
        self.failed: dict[int, dict[str, Any]] = {int(k): v for k, v in (data.get("failed") or {}).items()}
        self.active_seconds = float(data.get("active_seconds") or 0.0)
        self.finished = bool(data.get("finished"))
        self.skipped: set[int] = set()  # settled before this daemon opened the run (batch_stats)

    @classmethod
    def load(cls, run_dir: Path) -> Checkpoint | None:
        """The checkpoint of ``run_dir``, or None when it has none.  Raises :class:`CheckpointError`."""
        path = run_dir / NAME
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"{path}: cannot read the checkpoint: {exc}") from None
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise CheckpointError(f"{path}: not a version-{VERSION} hermesd batch checkpoint")
        try:
            return cls(run_dir, data)
        except (TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(f"{path}: malformed checkpoint: {exc}") from None

    def settled(self) -> set[int]:
        """Indices that never run again: written to a batch file or discarded."""
        return self.done | set(self.discarded)

    def commonest_errors(self, most: int = 3) -> list[dict[str, Any]]:
        """The errors of the ``failed`` prompts, commonest first: ``[{error, count}]``, at most
        ``most`` of them (an error's text cut to 300 characters)."""
        counts = Counter(str(entry.get("error") or entry.get("status") or "failed")[:300]
                         for entry in self.failed.values())
        return [{"error": error, "count": count} for error, count in counts.most_common(most)]

    def batch_stats(self) -> dict[str, dict[str, int]]:
        """Hermes' ``batch_stats`` (see the module doc), by batch number."""
        size = int(self.settings.get("batch_size") or 1)
        stats: dict[str, dict[str, int]] = {}
        for index in sorted(self.settled() | set(self.failed)):
            entry = stats.setdefault(str(index // size), {"processed": 0, "skipped": 0, "discarded_no_reasoning": 0})
            entry["skipped" if index in self.skipped else "processed"] += 1
            record = self.discarded.get(index)
            entry["discarded_no_reasoning"] += record is not None and record.get("reason", "no_reasoning") == "no_reasoning"
        return stats

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (see the module doc)."""
        now = clock.now_iso()
        return {"run_name": self.run_name, "completed_prompts": sorted(self.settled()),
                "batch_stats": self.batch_stats(), "last_updated": now,
                "version": VERSION, "job": self.job, "settings": self.settings,
                "total_prompts": self.total_prompts, "bad_lines": self.bad_lines,
                "line_digests": self.line_digests, "done": sorted(self.done),
                "discarded": {str(k): v for k, v in sorted(self.discarded.items())},
                "failed": {str(k): v for k, v in sorted(self.failed.items())},
                "active_seconds": round(self.active_seconds, 3), "updated_at": now,
                "finished": self.finished}

    def save(self) -> None:
        """Replace ``checkpoint.json`` atomically (fsynced).  Raises ``OSError``."""
        files.write_json(self.path, self.to_dict())
