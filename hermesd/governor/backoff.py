"""The pause of one endpoint after the provider said no (a 429, a 529 or 503, an overload mid-stream).

Back-off is per pause, not per refusal:

* **one pause for the calls refused together.**  The first refusal of a call granted after the
  last pause began starts a pause for every child; a refusal of a call granted before it (it was
  in flight when the provider went away) belongs to that pause and changes nothing — so a burst
  of N refusals is one pause of the current step, never N steps at once;
* **a probe, then the rest.**  When a pause ends, one call goes first (the probe); the others
  wait until it is answered: refused, it starts the next pause; answered, the rest go.  A probe
  that is not refused within :data:`PROBE_SECONDS` (a long call streaming its answer; a refusal
  comes at once) counts as answered;
* **the step grows only when a probe is refused again:** 1, 2, 4 … s up to :data:`MOST_SECONDS`
  (the pause itself is exact; each wait told carries the limiter's jitter), and a success of a
  call granted after the pause began resets it.  Only pauses whose length hermesd chose grow
  it: after pauses the provider timed (``retry-after``, or the headers' hint) a refusal without
  either starts again at the first step — not at 16 s because the provider had asked five
  times for 20 ms.  The probe is one call, so a short step costs the
  provider nothing: after an outage of 15 s the fleet's probes come at about 1, 3, 7 and 15 s and
  the first answer within a second or two of the recovery, where one step per refusal (four calls
  refused together) had waited 28 s;
* **``retry-after`` wins** where the provider gives it (also for a refusal of the same burst,
  when it asks for longer), and a caller may pass a ``hint`` instead (the headers saying when
  the next unit of a limit frees up) for a refusal without one.

The official SDKs back off per request instead (anthropic-sdk-python ``_calculate_retry_timeout``:
0.5 s doubling to 8 s, per client); TCP's retransmission timer is the model of one timer doubled
per lost probe, reset by an acknowledgement (RFC 6298 §5).  All times are monotonic seconds
passed in, so tests drive the clock.
"""

from __future__ import annotations

from dataclasses import dataclass

FIRST_SECONDS = 1.0
"""The first pause after a refusal that gave no ``retry-after``."""

MOST_SECONDS = 30.0
"""The longest pause (the step stops doubling here): one probe a half-minute at most during an outage."""

PROBE_SECONDS = 2.0
"""A probe not refused within this long is taken as answered: the rest go (a refusal comes at once)."""

POLL_SECONDS = 0.2
"""How long a call waits for the probe's answer before it asks again."""


@dataclass
class Backoff:
    """The pause of one limiter (see the module doc).

    ``until`` (monotonic) and ``reason`` of the current pause; ``strikes``: pauses since the last
    success; ``doublings``: those of them whose length was the step, not the provider's (the
    next step is ``FIRST_SECONDS * 2 ** doublings``); ``began_seq``: the last grant
    made before the current pause began (its refusals and successes belong to it); ``probing``:
    the next call granted is a probe; ``probe``/``probe_at``: the probe in flight and when it
    was granted.
    """

    until: float = 0.0
    reason: str = ""
    strikes: int = 0
    doublings: int = 0
    began_seq: int = 0
    probing: bool = False
    probe: str | None = None
    probe_at: float = 0.0

    def step(self) -> float:
        """The next pause's length, in seconds, for a refusal without ``retry-after``."""
        return min(MOST_SECONDS, FIRST_SECONDS * 2.0 ** min(self.doublings, 32))

    def refused(self, seq: int, last_seq: int, what: str, retry_after: float | None, now: float,
                hint: float | None = None) -> bool:
        """The call granted as ``seq`` was refused (``what``: ``rate limit (429)``, ``overloaded``);
        ``last_seq``: the newest grant so far.  True when this began a new pause (the step then
        grew), False when the call belongs to the pause already begun."""
        if seq <= self.began_seq:
            if retry_after is not None and now + retry_after > self.until:
                self.until = now + retry_after  # the provider asks for longer: it wins
            return False
        wait = retry_after if retry_after is not None else hint if hint is not None else self.step()
        self.strikes += 1
        if retry_after is None and hint is None:
            self.doublings += 1
        self.began_seq = last_seq
        self.until = max(self.until, now + wait)
        self.reason = f"the provider answered {what}" + (
            f", retry-after {retry_after:g}s" if retry_after is not None else f"; backing off {wait:g}s")
        self.probing, self.probe = True, None
        return True

    def succeeded(self, seq: int) -> None:
        """The call granted as ``seq`` went well: a call granted after the pause began resets the step."""
        if seq > self.began_seq:
            self.strikes = self.doublings = 0
            self.probing = False

    def wait(self, now: float) -> tuple[float, str]:
        """``(seconds, reason)`` a call must wait for the pause or the probe (0: it may go)."""
        if self.until > now:
            return self.until - now, self.reason
        if self.probing and self.probe is not None:
            if now - self.probe_at < PROBE_SECONDS:
                return POLL_SECONDS, f"one call tests whether the provider is back (after: {self.reason})"
            self.probing = False  # not refused so far: answered
        return 0.0, ""

    def granted(self, grant_id: str, now: float) -> None:
        """A call was granted: while probing and no probe is out, it is the probe."""
        if self.probing and self.probe is None:
            self.probe, self.probe_at = grant_id, now

    def ended(self, grant_id: str, refused: bool) -> None:
        """The call of ``grant_id`` was answered (``refused``: it started or joined a pause): a
        probe answered otherwise (well, or with an error that is no refusal) lets the rest go."""
        if grant_id == self.probe:
            self.probe = None
            if not refused:
                self.probing = False

    def released(self, grant_id: str) -> None:
        """The call of ``grant_id`` will not report (its job ended): the next call probes instead."""
        if grant_id == self.probe:
            self.probe = None
