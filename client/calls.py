"""What a client asks of hermesd, whatever carries the requests: its errors, the pages of a
list, the events since a seq, waiting for a job across a daemon restart.

Two transports implement :class:`Calls` (their ``call`` method, one request and its
reply): :class:`client.connection.Connection` over pyzmq, and the fast path's
:class:`client.fast.Link` over :mod:`client.zmtp`; everything built on ``call`` is
here, once, so both behave alike.  A dead daemon is known from its files
(:func:`daemon_gone`) without pyzmq.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from hermesd import paths, protocol
from hermesd.protocol import ProtocolError

TYPE_CHECKING = False  # as hermesd.protocol's: typing is not imported
if TYPE_CHECKING:
    from typing import Any, Callable, Iterator

GAP_EVENT = "events.removed"
"""Type of the marker :meth:`client.connection.Connection.follow` yields where retention removed
events: ``seq`` is the last removed one, ``data`` is ``{since, oldest_seq}``."""


def gap_marker(gap: dict[str, int]) -> dict[str, Any]:
    """The marker event for an ``events_since`` reply's ``gap`` (``{since, oldest_seq}``)."""
    return {"v": protocol.PROTOCOL_VERSION, "seq": gap["oldest_seq"] - 1, "type": GAP_EVENT,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "job": None, "session": None,
            "data": dict(gap)}


RESTART_GRACE_SECONDS = 10.0
"""How long :meth:`Calls.wait_job` gives a daemon that stopped under it to come back
(systemd's unit restarts it after ``RestartSec=2s``), within the wait's own timeout; a new
daemon that holds the lock and is still starting extends it."""


class ClientError(Exception):
    """A client-side failure with a protocol-style ``code`` (``daemon_not_running``, ``timeout``).

    ``lost``: the daemon answered on this connection, or was reached, and then went away.
    """

    def __init__(self, code: str, message: str, lost: bool = False):
        super().__init__(message)
        self.code = code
        self.message = message
        self.lost = lost


AWAY_POLL_SECONDS = 1.0
"""Seconds between two looks of a follower for the daemon it lost (:class:`Away`)."""


class Away:
    """What a follower (``events -f``, ``logs -f``) says of a daemon it lost once it had reached
    it: once when it goes (``WHY; following WHAT again once it is back``), once when it answers
    again (``hermesd is back; following WHAT again``), each through ``say(text)``.  :meth:`lost`
    takes the ``lost`` callbacks of :meth:`client.connection.Connection.follow`; :meth:`retry`
    runs a request until the daemon answers it."""

    def __init__(self, say: Callable[[str], None], what: str):
        self.say, self.what, self.away = say, what, False

    def lost(self, why: str | None) -> None:
        """The daemon could not be reached (``why``), or answered again (None)."""
        if why is None:
            if self.away:
                self.say(f"hermesd is back; following {self.what} again")
            self.away = False
        elif not self.away:
            self.away = True
            self.say(f"{why}; following {self.what} again once it is back")

    def retry(self, step: Callable[[], Any]) -> Any:
        """``step()``'s value, tried again every :data:`AWAY_POLL_SECONDS` for as long as it raises
        :class:`ClientError` (the daemon gone, or not answering); :class:`ProtocolError` (the daemon
        refused) goes through."""
        while True:
            try:
                value = step()
            except ClientError as err:
                self.lost(err.message)
                time.sleep(AWAY_POLL_SECONDS)
                continue
            self.lost(None)
            return value


def lock_pid(lock: Path) -> int | None:
    """The pid written in ``hermesd.lock`` (``None`` when missing or unreadable)."""
    try:
        return int(lock.read_text().strip())
    except (OSError, ValueError):
        return None


def starting(sockets: paths.Sockets) -> bool:
    """True when the pid in ``hermesd.lock`` is alive: a daemon holds the directory (a new one
    writes its pid there as soon as it has the lock, before it binds its sockets)."""
    pid = lock_pid(sockets.lock)
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def replaced(sockets: paths.Sockets, served_by: int | None) -> str | None:
    """Why a request on a connection made while daemon ``served_by`` held the lock may never be
    answered: another daemon holds it now (the first died and a new one started between two
    liveness checks; the socket reconnected to the new one, which may never have seen the
    request; the connection is then made anew).  None when the same daemon (or none known)
    holds it."""
    now = lock_pid(sockets.lock)
    if served_by is None or now is None or now == served_by:
        return None
    return f"its daemon (pid {served_by}) was replaced by pid {now}"


def daemon_gone(sockets: paths.Sockets) -> str | None:
    """Why no daemon serves ``sockets`` (a short reason), or ``None`` when one may.

    Proof of absence, cheapest first: the control socket file is missing; connecting
    to it is refused (no process listens: its daemon died and left the file); the pid
    written in ``hermesd.lock`` by the daemon that took the lock no longer exists.
    Never touches the lock itself (a probe could make a starting daemon fail).
    """
    control = sockets.control
    if not control.exists():
        return f"no socket at {control}"
    import socket  # here: only a first connection pays for it

    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(0.2)
        probe.connect(str(control))
    except (ConnectionRefusedError, FileNotFoundError):
        return f"stale socket {control}: nothing listens on it"
    except OSError:
        pass  # e.g. a path longer than the Unix limit: zmq says more
    finally:
        probe.close()
    pid = lock_pid(sockets.lock)
    if pid is not None and not starting(sockets):
        return f"stale socket {control}: its daemon (pid {pid}) is gone"
    return None


PROBE_SECONDS = 1.0
"""How long :func:`not_hermesd` waits for the peer's greeting."""


def not_hermesd(control: Path, why: str | None = None) -> ClientError | None:
    """The ``not_hermesd`` error (exit 3) when the peer on socket ``control`` does not speak
    ZMTP 3 (:mod:`client.zmtp`: it closed the connection or sent something else), saying
    ``why`` when the caller already knows it; None when it greets as hermesd does, or does not
    greet within :data:`PROBE_SECONDS` (a busy or hung peer: the caller's timeout says so)."""
    if why is None:
        from client import zmtp  # here: only a slow reply pays for the probe

        try:
            zmtp.Dealer(str(control), PROBE_SECONDS).close()
            return None
        except zmtp.WireError as exc:
            why = str(exc)
        except OSError:
            return None
    return ClientError("not_hermesd", f"what answers on {control} is not hermesd ({why}); check "
                                      "HERMES_RUNTIME_DIR / --runtime-dir: the socket belongs to another program")


def start_command(sockets: paths.Sockets) -> str:
    """How the daemon of ``sockets`` is started again, judged by where its sockets are: the
    system unit's ``/run/hermes`` (``RuntimeDirectory=hermes``), the user unit's
    ``$XDG_RUNTIME_DIR/hermes`` when that unit is installed, else ``hermesd run``."""
    if sockets.dir == Path("/run/hermes"):
        return "sudo systemctl start hermesd"
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    user_unit = Path.home() / ".config" / "systemd" / "user" / "hermesd.service"
    if xdg and sockets.dir == Path(xdg) / "hermes" and user_unit.exists():
        return "systemctl --user start hermesd"
    return "hermesd run"


def not_running(why: str, sockets: paths.Sockets | None = None) -> ClientError:
    """The ``daemon_not_running`` error (exit 3) saying ``why`` and how to start the daemon of ``sockets``."""
    command = start_command(sockets or paths.sockets())
    return ClientError("daemon_not_running", f"hermesd is not running ({why}); start it with `{command}`")


def _within(path: Path, top: Path) -> bool:
    return path == top or top in path.parents


def unreachable(path: Path, exc: OSError) -> ClientError:
    """The one-line error (``daemon_not_running``, exit 3) for socket ``path`` that cannot even be
    looked at: a directory on its way that is not a directory (``HERMES_HOME`` or
    ``HERMES_RUNTIME_DIR`` naming a file), or one this user may not enter (another user's
    runtime directory, the system unit's ``/run/hermes`` without ``sudo -u hermes``)."""
    if isinstance(exc, NotADirectoryError):
        blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), path.parent)
        names = [f"{name}={os.environ[name]}" for name in ("HERMES_HOME", "HERMES_RUNTIME_DIR", "XDG_RUNTIME_DIR")
                 if os.environ.get(name) and _within(Path(os.environ[name]).expanduser(), blocker)]
        named = f" ({', '.join(names)})" if names else ""
        return ClientError("daemon_not_running", f"cannot reach hermesd at {path}: {blocker} is not a directory"
                           f"{named}; point HERMES_HOME / HERMES_RUNTIME_DIR at the daemon's directories")
    if isinstance(exc, PermissionError):
        return ClientError("daemon_not_running", f"cannot reach hermesd at {path}: permission denied (uid "
                           f"{os.getuid()}); run the client as the daemon's user (e.g. sudo -u hermes hermesctl …) "
                           "or set HERMES_RUNTIME_DIR to your own daemon's runtime directory")
    return ClientError("daemon_not_running", f"cannot reach hermesd at {path}: {exc.strerror or exc}")


def too_large(op: str, args: dict[str, Any], size: int) -> ProtocolError:
    """The ``too_large`` error (exit 2) of request ``op`` whose frame is ``size`` bytes, over
    :data:`hermesd.protocol.MAX_MESSAGE_BYTES`, naming its largest argument: said before
    anything is sent (the daemon would have to read all of it to say the same)."""
    biggest = max(args, key=lambda k: len(protocol.packb(args[k])), default=None)
    what = f" (argument {biggest!r} is {len(protocol.packb(args[biggest])) / 1e6:.1f} MB)" if biggest else ""
    return ProtocolError("too_large", f"the {op!r} request is {size / 1e6:.1f} MB{what}; hermesd accepts "
                         f"requests up to {protocol.MAX_MESSAGE_BYTES // (1 << 20)} MiB",
                         {"field": biggest, "bytes": size, "limit": protocol.MAX_MESSAGE_BYTES})


def check_socket(path: Path) -> None:
    try:
        st = path.stat()
    except FileNotFoundError:  # also when a starting daemon just removed its predecessor's socket
        raise not_running(f"no socket at {path}", paths.Sockets(path.parent)) from None
    except OSError as exc:
        raise unreachable(path, exc) from None
    if st.st_uid != os.getuid() or not os.access(path, os.R_OK | os.W_OK):
        raise ClientError("daemon_not_running",
                          f"the socket {path} is not yours (owner uid {st.st_uid}); set HERMES_RUNTIME_DIR "
                          "to your own daemon's runtime directory")


class Calls:
    """What is built on one request: :meth:`jobs`, :meth:`events_newest_first`, the backlog of
    events, :meth:`wait_job`.  A subclass gives ``sockets`` (:class:`hermesd.paths.Sockets`) and
    ``call(op, _timeout=None, **args)`` raising :class:`ProtocolError` or :class:`ClientError`."""

    sockets: paths.Sockets

    def call(self, op: str, _timeout: float | None = None, **args: Any) -> Any:
        """The result of request ``op`` (``_timeout`` seconds instead of the transport's own)."""
        raise NotImplementedError

    def wait_job(self, job_id: str, timeout: float | None = None, notice: Callable[[str], None] | None = None,
                 *, chunk: float = 30.0, on_answer: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Block until job ``job_id`` is terminal; returns its record.

        ``timeout``: seconds (``None``: no limit).  Asks the daemon in ``wait`` chunks
        of at most ``chunk`` seconds, giving each answer of a job not yet done to ``on_answer``.
        If the daemon stops while waiting, it is given :data:`RESTART_GRACE_SECONDS` (within
        ``timeout``, longer while a new daemon holds the lock and starts) to come back, ``notice`` being
        told so; a daemon not running at the start fails at once.  Raises
        :class:`ClientError` (``daemon_not_running``, or ``timeout`` naming the job's
        status) or :class:`ProtocolError` (``not_found``…).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        lost_at: float | None = None
        while True:
            step = chunk if deadline is None else max(0.0, min(chunk, deadline - time.monotonic()))
            try:
                answer = self.call("wait", step + 10.0, id=job_id, timeout=step)
            except ClientError as err:
                if err.code == "timeout" and (deadline is None or time.monotonic() < deadline):
                    continue  # a busy daemon: ask again
                if err.code != "daemon_not_running" or not (err.lost or lost_at is not None):
                    raise
                now = time.monotonic()
                if lost_at is not None and starting(self.sockets):
                    lost_at = now  # a restart is under way: it has the lock, not yet its sockets
                if lost_at is None:
                    lost_at = now
                    if notice:
                        notice(f"{err.message}; waiting up to {RESTART_GRACE_SECONDS:g}s for it to restart")
                limit = lost_at + RESTART_GRACE_SECONDS
                if deadline is not None:
                    limit = min(limit, deadline)
                if now >= limit:
                    raise ClientError("daemon_not_running", f"hermesd stopped while waiting for job {job_id} "
                                      f"and did not come back: {err.message}") from None
                time.sleep(0.2)
                continue
            if lost_at is not None and notice:
                notice(f"hermesd is back; still waiting for job {job_id}")
            lost_at = None
            if answer["done"]:
                return answer["job"]
            if on_answer:
                on_answer(answer)
            if deadline is not None and time.monotonic() >= deadline:
                raise ClientError("timeout", f"job {job_id} is still {answer['job']['status']} after {timeout:g}s")

    def follow(self, since: int = 0, *, follow: bool = True) -> Iterator[dict[str, Any]]:
        """Every event with ``seq > since`` in order, exactly once, the backlog only (``follow`` must be
        false: following needs a subscription, :meth:`client.connection.Connection.follow`)."""
        if follow:
            raise NotImplementedError("following events needs client.connection.Connection")
        return self._backlog(since)

    def _backlog(self, since: int) -> Iterator[dict[str, Any]]:
        while True:
            page = self.call("events_since", since=since, limit=1000)
            if page.get("gap"):
                yield gap_marker(page["gap"])
            for event in page["events"]:
                since = event["seq"]
                yield event
            if not page.get("more"):
                return

    def jobs(self, **args: Any) -> Iterator[dict[str, Any]]:
        """Every job ``ps`` lists with ``args``, page after page (``cursor=next``)
        for as long as a reply says ``more``."""
        while True:
            page = self.call("ps", **args)
            yield from page["jobs"]
            if not page.get("more") or page.get("next") is None:
                return
            args["cursor"] = page["next"]

    def events_newest_first(self, types: list[str] | None = None) -> Iterator[dict[str, Any]]:
        """Every kept event, newest first, page after page (``events_since`` with
        ``order=newest``)."""
        before = None
        while True:
            page = self.call("events_since", order="newest", before=before, types=types, limit=1000)
            for event in page["events"]:
                before = event["seq"]
                yield event
            if not page.get("more"):
                return
