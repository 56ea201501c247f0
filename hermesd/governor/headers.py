"""What a provider's response headers say about its limits.

* ``retry-after-ms`` (milliseconds) and ``retry-after`` (seconds, or an HTTP date: RFC 9110
  §10.2.3), in that order, as the official SDKs read them (anthropic-sdk-python
  ``_calculate_retry_timeout``);
* Anthropic's ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}``,
  ``…-reset`` an RFC 3339 time at which the limit is fully replenished
  (https://docs.anthropic.com/en/api/rate-limits#response-headers);
* OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``, ``…-reset`` a duration such
  as ``6m0s`` or ``12ms`` (https://platform.openai.com/docs/guides/rate-limits#rate-limits-in-headers).

Where neither retry header is sent, a dimension with nothing remaining says when to come back:
its reset (anthropic-sdk-typescript issue #357).
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field

MAX_WAIT_SECONDS = 900.0
"""The longest pause a header may impose (a wrong clock or header must not stop the fleet for a day)."""

ANTHROPIC = re.compile(r"^anthropic-ratelimit-(requests|tokens|input-tokens|output-tokens)-(limit|remaining|reset)$")
OPENAI = re.compile(r"^x-ratelimit-(limit|remaining|reset)-(requests|tokens)$")
DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class Dim:
    """One limit a response told of: ``limit``, ``remaining`` (None when not sent), and
    ``reset`` seconds from now until it is fully replenished (None when not sent), given to
    ``resolution`` seconds (1.0: a time or duration in whole seconds; 0.001: with a fraction)."""

    limit: int | None = None
    remaining: int | None = None
    reset: float | None = None
    resolution: float = 0.0


@dataclass(frozen=True)
class Learned:
    """What one response's headers say: ``retry_after`` seconds (None: not sent) and the
    limits by dimension (``requests``, ``tokens``, ``input_tokens``, ``output_tokens``)."""

    retry_after: float | None = None
    dims: dict[str, Dim] = field(default_factory=dict)

    def exhausted_for(self) -> float | None:
        """Seconds until the latest reset of a dimension with nothing remaining (None if none is)."""
        resets = [d.reset for d in self.dims.values() if d.remaining is not None and d.remaining <= 0
                  and d.reset is not None]
        return max(resets) if resets else None


def read(headers: dict[str, str], now: float) -> Learned:
    """Parse ``headers`` (names in any case) at wall-clock time ``now`` (epoch seconds).
    Values that do not parse are ignored; never raises."""
    headers = {str(k).lower(): str(v).strip() for k, v in (headers or {}).items()}
    dims: dict[str, dict[str, float | int | None]] = {}
    for name, value in headers.items():
        match = ANTHROPIC.match(name)
        if match:
            dim, what = match.group(1).replace("-", "_"), match.group(2)
            parsed = _rfc3339_in(value, now) if what == "reset" else _int(value)
            resolution = 0.001 if "." in value else 1.0
        else:
            match = OPENAI.match(name)
            if not match:
                continue
            what, dim = match.group(1), match.group(2)
            parsed = duration(value) if what == "reset" else _int(value)
            resolution = 0.001 if "ms" in value or "." in value else 1.0
        if parsed is not None:
            dims.setdefault(dim, {})[what] = parsed
            if what == "reset":
                dims[dim]["resolution"] = resolution
    return Learned(retry_after(headers, now), {name: Dim(**values) for name, values in dims.items()})


def retry_after(headers: dict[str, str], now: float) -> float | None:
    """Seconds a response asks to wait: ``retry-after-ms``, else ``retry-after`` (seconds or an
    HTTP date); None when neither parses; at most :data:`MAX_WAIT_SECONDS`."""
    try:
        return _clamp(float(headers["retry-after-ms"]) / 1000.0)
    except (KeyError, ValueError):
        pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return _clamp(float(value))
    except ValueError:
        pass
    import email.utils  # here: an HTTP-date Retry-After only (the email package is 0.4 MiB of the idle daemon)

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return _clamp(when.timestamp() - now) if when is not None else None


def duration(text: str) -> float | None:
    """OpenAI's reset duration (``6m0s``, ``1.5s``, ``12ms``, ``1h2m``) in seconds; None if it is none."""
    text = text.strip()
    parts = DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return _clamp(sum(float(n) * UNITS[u] for n, u in parts))


def _rfc3339_in(text: str, now: float) -> float | None:
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return _clamp(when.timestamp() - now)


def _int(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:
        return None


def _clamp(seconds: float) -> float | None:
    if seconds != seconds:  # NaN
        return None
    return min(MAX_WAIT_SECONDS, max(0.0, seconds))
