"""Throwaway virtual environments for tests that need another release of a package, made once
per machine and kept (``$XDG_CACHE_HOME/hermesd-tests``, else ``~/.cache/hermesd-tests``), as
``bench/bench_peers.py`` keeps the peers' environment: a test run reuses what an earlier run
installed instead of paying pip again (minutes of CPU on two cores).

An environment is used only when its marker file says it holds exactly the requirements asked
for and its Python runs; otherwise it is made again from nothing.  The marker is written last,
so a run killed half-way never leaves a half-made environment to be reused.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import venv
from pathlib import Path

MARKER = "hermesd-requirements.txt"
"""The file in an environment's folder naming what was installed in it, one requirement a line."""


def cache_root() -> Path:
    """Where the environments are kept."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hermesd-tests"


def cached_venv(name: str, requirements: list[str], timeout: float = 900) -> str:
    """The Python of the environment ``name`` holding ``requirements`` (pip's syntax), made when
    missing or different.  Raises ``subprocess.CalledProcessError`` when pip fails."""
    where = cache_root() / name
    wanted = "\n".join(requirements) + "\n"
    python = where / "bin" / "python"
    marker = where / MARKER
    if marker.is_file() and marker.read_text() == wanted and \
            subprocess.run([str(python), "-c", "pass"], capture_output=True).returncode == 0:
        return str(python)
    shutil.rmtree(where, ignore_errors=True)
    venv.create(where, with_pip=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *requirements], check=True, timeout=timeout)
    marker.write_text(wanted)
    return str(python)
