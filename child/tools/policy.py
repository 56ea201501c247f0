"""Which shell commands count as dangerous (denied in children unless
``delegation.subagent_auto_approve: true``).

This is a tripwire against well-known destructive one-liners, not a sandbox:
a determined command can always hide its intent (``eval``, scripts, encodings).
The rules err on the side of refusing: a refused command costs the model one
rephrasing, a wrong approval can cost a machine.

Each :class:`Rule` is a name, the reason shown to the model, and regular
expressions that must all match within one simple command (the text between
``;``, ``&``, ``|`` and newlines) — or, for ``whole=True`` rules, anywhere in the
command line (pipes are what they look for).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_AT_COMMAND = r"(?:^|\bsudo\s+|\bexec\s+|\bnohup\s+|\benv\s+|\bxargs\s+|-c\s+['\"]?)\s*"
"""Where a command word can stand within one simple command."""

_SYSTEM_PATH = (r"\s(?:/|/\*|~/?|\$\{?HOME\}?/?|/(?:bin|boot|dev|etc|home|lib|lib32|lib64|opt|proc|root|"
                r"sbin|srv|sys|usr|var)/?\*?)(?=\s|$|['\")])")
"""A target that is the root, the home directory or a top-level system directory."""


@dataclass(frozen=True)
class Rule:
    """One kind of dangerous command: ``patterns`` (all must match) and the ``reason``."""

    name: str
    reason: str
    patterns: tuple[str, ...]
    whole: bool = False


RULES: tuple[Rule, ...] = (
    Rule("recursive_delete", "recursive delete of the root, home or a system directory",
         (r"\brm\s", r"\s(?:-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)\b", _SYSTEM_PATH)),
    Rule("find_delete", "find -delete over the root, home or a system directory",
         (r"\bfind" + _SYSTEM_PATH, r"\s-delete\b")),
    Rule("recursive_permissions", "recursive chmod/chown of the root, home or a system directory",
         (r"\b(?:chmod|chown|chgrp)\s", r"\s(?:-[a-zA-Z]*R[a-zA-Z]*|--recursive)\b", _SYSTEM_PATH)),
    Rule("make_filesystem", "creating or wiping a filesystem",
         (r"\b(?:mkfs(?:\.\w+)?|mke2fs|mkswap|wipefs)\b",)),
    Rule("raw_disk_write", "dd writing to a device",
         (r"\bdd\s", r"\bof=/dev/(?!null\b|zero\b|stdout\b|stderr\b)")),
    Rule("device_redirect", "redirecting output onto a disk device",
         (r">\s*/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk|md|dm-)",), whole=True),
    Rule("fork_bomb", "a fork bomb",
         (r"([\w:.-]+)\s*\(\)\s*\{[^}]*\1\s*\|\s*\1\s*&",), whole=True),
    Rule("power", "shutting down or rebooting the machine",
         (_AT_COMMAND + r"(?:shutdown|reboot|halt|poweroff)\b|\binit\s+[06]\b"
          r"|\bsystemctl\s+(?:poweroff|reboot|halt|kexec|emergency|rescue)\b",)),
    Rule("kill_everything", "killing every process (kill -1)",
         (r"\bkill\s+(?:-\S+\s+)*-1\s*$",)),
    Rule("pipe_to_shell", "running a downloaded script (curl/wget piped into a shell)",
         (r"\b(?:curl|wget)\b[^;&\n]*\|\s*(?:sudo\s+)?(?:env\s+)?(?:ba|z|da|k|c|tc|fi)?sh\b",), whole=True),
    Rule("shell_of_download", "running a downloaded script (a shell reading curl/wget output)",
         (r"\b(?:ba|z|da|k)?sh\b[^;&\n]*(?:<\(|\$\(|`)\s*(?:curl|wget)\b",), whole=True),
)
"""The dangerous-command rules, checked in order; the first match names the reason."""

_COMPILED = tuple((rule, tuple(re.compile(p) for p in rule.patterns)) for rule in RULES)
_SPLIT = re.compile(r"[;&|\n]+")


def dangerous(command: str) -> Rule | None:
    """Return the first :class:`Rule` that ``command`` (a ``/bin/sh -c`` string)
    breaks, or ``None`` when no rule matches."""
    parts = [p.strip() for p in _SPLIT.split(command)]
    for rule, patterns in _COMPILED:
        for text in ([command] if rule.whole else parts):
            if all(p.search(text) for p in patterns):
                return rule
    return None
