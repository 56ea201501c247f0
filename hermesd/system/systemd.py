"""sd_notify(3) for ``Type=notify`` units: READY, STATUS, WATCHDOG, STOPPING.

The protocol is one datagram of ``KEY=VALUE`` lines to the ``AF_UNIX`` socket
named by ``$NOTIFY_SOCKET`` (a leading ``@`` means the abstract namespace).
Outside systemd (no ``NOTIFY_SOCKET``) every call is a no-op.
"""

from __future__ import annotations

import os
import socket


class Notifier:
    """Sends sd_notify messages; reads ``NOTIFY_SOCKET`` and ``WATCHDOG_USEC`` once."""

    def __init__(self, environ: dict[str, str] | None = None):
        env = os.environ if environ is None else environ
        self.address = env.get("NOTIFY_SOCKET") or None
        usec = env.get("WATCHDOG_USEC")
        pid = env.get("WATCHDOG_PID")
        self.watchdog_seconds: float | None = None
        if usec and usec.isdigit() and (not pid or pid == str(os.getpid())):
            self.watchdog_seconds = int(usec) / 1_000_000

    def notify(self, **fields: str) -> bool:
        """Send ``KEY=VALUE`` lines (e.g. ``notify(READY="1", STATUS="…")``); False if not sent."""
        if not self.address:
            return False
        addr = self.address
        if addr.startswith("@"):
            addr = "\0" + addr[1:]
        message = "\n".join(f"{k}={v}" for k, v in fields.items()).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(message, addr)
            return True
        except OSError:
            return False
