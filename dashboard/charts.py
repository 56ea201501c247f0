"""Charts as inline SVG (no script, no library): bars for a histogram or a breakdown.

Drawn on the server from plain numbers; the text is escaped by the templates that embed it
(Jinja2's autoescape) — this module only returns geometry."""

from __future__ import annotations

from typing import Any


def bars(items: list[tuple[str, float]], width: int = 560, bar_height: int = 18, label_width: int = 170) -> dict[str, Any]:
    """Horizontal bars: ``items`` as ``(label, value)``; returns ``{width, height, bars: [{label,
    value, y, w}]}`` for ``templates/_bars.html`` (the longest bar fills the width)."""
    top = max((v for _, v in items), default=0) or 1
    room = width - label_width - 70
    return {"width": width, "height": max(1, len(items)) * (bar_height + 4), "label_width": label_width,
            "bar_height": bar_height,
            "bars": [{"label": label, "value": value, "y": i * (bar_height + 4), "w": max(1, round(room * value / top))
                      if value else 0} for i, (label, value) in enumerate(items)]}


def histogram(values: list[float], bins: int = 10, lo: float | None = None, hi: float | None = None,
              width: int = 560, height: int = 160) -> dict[str, Any]:
    """A histogram of ``values`` in ``bins`` equal bins over ``[lo, hi]`` (default: their range; a
    reward's usual [0, 1] when they lie in it); returns ``{width, height, bins: [{lo, hi, count, x, w,
    h, y}], total}`` for ``templates/_histogram.html``."""
    if not values:
        return {"width": width, "height": height, "bins": [], "total": 0}
    lo = min(values) if lo is None else lo
    hi = max(values) if hi is None else hi
    if 0 <= lo and hi <= 1:
        lo, hi = 0.0, 1.0
    span = (hi - lo) or 1.0
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, max(0, int((v - lo) / span * bins)))] += 1
    top = max(counts) or 1
    plot = height - 30
    step = width / bins
    return {"width": width, "height": height, "total": len(values),
            "bins": [{"lo": lo + span * i / bins, "hi": lo + span * (i + 1) / bins, "count": n,
                      "x": round(i * step, 1), "w": round(step - 2, 1), "h": round(plot * n / top, 1),
                      "y": round(plot - plot * n / top, 1)} for i, n in enumerate(counts)]}
