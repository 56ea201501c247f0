"""The settings of one batch run: the ``hermes-batch`` flags, as the daemon keeps them.

They live in the batch job's ``spec`` column (so a restarted daemon can continue
the run) and in ``checkpoint.json`` (so ``--resume`` can check that the run is
the same one).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIXED = ("dataset_file", "batch_size", "distribution")
"""Settings a resume may not change: batch files are numbered by ``batch_size``,
prompts are the dataset's lines, and toolsets are drawn by the distribution."""


@dataclass(frozen=True)
class Settings:
    """``run_name``; ``dataset_file`` and ``output_dir`` (absolute paths);
    ``batch_size``, ``num_workers``, ``max_turns`` (>= 1); ``distribution``
    (a name of ``batch.distributions``); ``reasoning_effort``, ``max_samples``
    and ``model`` (None: the daemon's default / the whole dataset)."""

    run_name: str
    dataset_file: str
    output_dir: str
    batch_size: int
    num_workers: int = 4
    max_turns: int = 10
    distribution: str = "default"
    reasoning_effort: str | None = None
    max_samples: int | None = None
    model: str | None = None

    @property
    def run_dir(self) -> Path:
        """``OUTPUT_DIR/RUN_NAME``."""
        return Path(self.output_dir) / self.run_name

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Settings:
        """Settings from :meth:`to_dict` output (unknown keys ignored).  Raises ``TypeError``
        when a required key is missing."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def conflicts(self, stored: dict[str, Any]) -> list[str]:
        """Why this run cannot resume the one whose settings are ``stored``: one
        message per :data:`FIXED` setting that differs (empty when compatible)."""
        mine = self.to_dict()
        return [f"--{key} {mine[key]!r} differs from the run's checkpoint ({stored[key]!r})"
                for key in FIXED if key in stored and stored[key] != mine[key]]
