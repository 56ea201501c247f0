"""The dashboard's part of ``config.yaml``: ``dashboard:`` (a leaf: dataclasses only).

The daemon only checks it (``hermesd check-config``); the dashboard process (``hermesctl dashboard``,
the ``dashboard`` package) reads it."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from hermesd.config import section

DEFAULT_LISTEN = "127.0.0.1:8770"


def split_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[V6]:PORT`` for IPv6; port 0: any free one) as ``(host, port)``.  Raises
    ``ValueError`` saying what it must be."""
    host, sep, port = text.strip().rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"must be HOST:PORT such as {DEFAULT_LISTEN}, not {text!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is only reachable from this machine: ``localhost`` or
    a loopback address (RFC 5735 127/8, RFC 4291 ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Dashboard:
    """``dashboard:`` — the web page of ``hermesctl dashboard`` (docs/operations.md, "The dashboard").

    ``listen``: ``HOST:PORT`` it serves on; an address other than loopback needs ``allow_remote:
    true`` (and is said loudly at start); ``read_only``: no buttons, every action refused;
    ``metrics_public``: ``/metrics`` without the token (a scraper on loopback); ``nice``: the niceness
    the dashboard process takes at start (0–19, ``nice(2)``): when the CPU is short, hermesd and its
    children are served before the pages people watch."""

    listen: str = DEFAULT_LISTEN
    allow_remote: bool = False
    read_only: bool = False
    metrics_public: bool = False
    nice: int = 10


@dataclass(frozen=True)
class Sections:
    """The dashboard's part of ``config.yaml`` (:data:`hermesd.paths.PLUGIN_ROOTS`)."""

    dashboard: Dashboard = section(Dashboard)

    def check(self: Any) -> list[tuple[str, str]]:
        """``dashboard.listen`` is ``HOST:PORT``; a host other than loopback needs ``allow_remote``;
        ``dashboard.nice`` is 0–19."""
        nice = self.dashboard.nice
        if isinstance(nice, bool) or not isinstance(nice, int) or not 0 <= nice <= 19:
            return [("dashboard.nice", f"must be a whole number from 0 to 19 (nice(2): higher yields the CPU "
                     f"to hermesd sooner), not {nice!r}")]
        try:
            host, _ = split_listen(self.dashboard.listen)
        except ValueError as exc:
            return [("dashboard.listen", str(exc))]
        if not is_loopback(host) and not self.dashboard.allow_remote:
            return [("dashboard.listen", f"{host} is reachable from other machines; set dashboard.allow_remote: true "
                     "to serve the dashboard there (anyone who has its token can then act on your jobs)")]
        return []
