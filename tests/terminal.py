"""A real terminal for tests: a command run in a private tmux server, driven with
``send-keys`` and read with ``capture-pane`` (what a person would see).

Each :class:`Terminal` starts its own tmux server on a socket in the test's
temporary directory, so it never touches a person's tmux; :meth:`close` kills
that server and with it the command.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from tests.harness import wait_for


def need_tmux() -> None:
    """Skip the test when tmux is not installed (``.ci/run`` installs it)."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")


class Terminal:
    """``argv`` running in a ``width``×``height`` terminal with environment ``env``, in ``cwd``.

    When the command ends the pane stays, showing ``[exit N]``.
    """

    def __init__(self, base: Path, argv: list[str], env: dict[str, str], cwd: Path,
                 width: int = 80, height: int = 24):
        need_tmux()
        self.socket = str(base / "tmux.sock")
        # the shell catches SIGINT (a trap, not an ignore: the command gets it), so Ctrl-C ends only the command
        command = f"trap 'true' INT; {shlex.join(argv)}; echo \"[exit $?]\"; sleep 600"
        self._tmux("new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height),
                   "sh", "-c", command, env={**env, "TERM": "xterm-256color"}, cwd=cwd)

    def _tmux(self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
        out = subprocess.run(["tmux", "-S", self.socket, *args], capture_output=True, text=True, timeout=30,
                             env=env, cwd=cwd)
        if out.returncode != 0:
            raise AssertionError(f"tmux {args[0]} failed: {out.stderr}")
        return out.stdout

    def keys(self, *keys: str) -> None:
        """``tmux send-keys``: key names (``C-c``, ``Up``, ``Enter``) or literal text."""
        self._tmux("send-keys", "-t", "t", *keys)

    def type(self, text: str) -> None:
        """Type ``text`` literally, then Enter."""
        self._tmux("send-keys", "-t", "t", "-l", text)
        self._tmux("send-keys", "-t", "t", "Enter")

    def screen(self) -> str:
        """What the terminal shows now (its visible lines, wrapped lines joined)."""
        return self._tmux("capture-pane", "-p", "-J", "-t", "t")

    def wait(self, cond: str | Callable[[str], bool], timeout: float = 30.0, what: str | None = None) -> str:
        """Wait until the screen shows text ``cond`` (or ``cond(screen)`` holds); returns the screen."""
        test = (lambda s: cond in s) if isinstance(cond, str) else cond
        last = [""]

        def check() -> str | None:
            last[0] = self.screen()
            return last[0] if test(last[0]) else None

        try:
            return wait_for(check, timeout, 0.1, what or repr(cond))
        except AssertionError as err:
            raise AssertionError(f"{err}; the screen:\n{last[0]}") from None

    def close(self) -> None:
        """Kill the tmux server and the command in it."""
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, timeout=30)


def hermesctl(*args: str) -> list[str]:
    """The argv of ``hermesctl ARGS`` with this Python."""
    return [sys.executable, "-m", "client", *args]
