"""A batch run's folder as the batch page reads it: its samples, failures and files.

The run's files are its output, documented in docs/protocol.md (the trajectory line) and read here
as any consumer reads them: ``batch_N.jsonl`` (one line per sample; appended only), ``checkpoint.json``
(``failed``: the prompts that failed, with their error and job), ``statistics.json``.  A
:class:`RunFiles` reads each batch file once, then only what was appended since, keeping per sample
its index, reward, whether it completed, its model calls, the start of its prompt and where its line
is (so one sample is read back alone for the trajectory browser)."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BATCH_FILE = re.compile(r"^batch_(\d+)\.jsonl$")


@dataclass
class Sample:
    """What the page lists of one written sample."""

    index: int
    reward: float | None
    completed: bool
    partial: bool
    api_calls: int
    prompt: str
    job: str | None
    file: str
    start: int
    end: int


def first_prompt(line: dict[str, Any]) -> str:
    """The first user message of a line (its ``messages``, else its ShareGPT ``conversations``), cut."""
    for message in line.get("messages") or []:
        if message.get("role") == "user":
            return str(message.get("content") or "")[:300]
    for turn in line.get("conversations") or []:
        if turn.get("from") == "human":
            return str(turn.get("value") or "")[:300]
    return ""


class RunFiles:
    """The samples of one run folder, read incrementally (thread-safe)."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.offsets: dict[str, int] = {}
        self.samples: dict[int, Sample] = {}
        self.lock = threading.Lock()

    def refresh(self) -> list[Sample]:
        """Read what was appended to the batch files since the last call; every sample, by index."""
        with self.lock:
            try:
                names = sorted(p.name for p in self.run_dir.iterdir() if BATCH_FILE.match(p.name))
            except OSError:
                names = []
            for name in names:
                self._read(name)
            return [self.samples[i] for i in sorted(self.samples)]

    def _read(self, name: str) -> None:
        path = self.run_dir / name
        start = self.offsets.get(name, 0)
        try:
            with open(path, "rb") as fh:
                fh.seek(start)
                data = fh.read()
        except OSError:
            return
        whole = data[:data.rfind(b"\n") + 1]
        position = start
        for raw in whole.splitlines(keepends=True):
            begin, position = position, position + len(raw)
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            index = line.get("prompt_index")
            if not isinstance(index, int) or index in self.samples:
                continue  # an index's first line counts, as in the merge
            reward = line.get("reward")
            self.samples[index] = Sample(
                index, float(reward) if isinstance(reward, (int, float)) and not isinstance(reward, bool) else None,
                bool(line.get("completed")), bool(line.get("partial")), int(line.get("api_calls") or 0),
                first_prompt(line), (line.get("metadata") or {}).get("job"), name, begin, position)
        self.offsets[name] = start + len(whole)

    def line(self, index: int) -> dict[str, Any] | None:
        """The whole line of sample ``index`` (None when it is not written)."""
        sample = self.samples.get(index)
        if sample is None:
            return None
        try:
            with open(self.run_dir / sample.file, "rb") as fh:
                fh.seek(sample.start)
                return json.loads(fh.read(sample.end - sample.start))
        except (OSError, ValueError):
            return None

    def json_file(self, name: str) -> dict[str, Any]:
        """``checkpoint.json`` or ``statistics.json`` of the run, ``{}`` when missing or unreadable."""
        try:
            data = json.loads((self.run_dir / name).read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def files(self) -> list[tuple[str, int]]:
        """The run folder's files and their sizes in bytes, by name."""
        try:
            return sorted((p.name, p.stat().st_size) for p in self.run_dir.iterdir() if p.is_file())
        except OSError:
            return []
