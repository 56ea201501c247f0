"""The prompt cache over a session: the share of each turn's input tokens read from the cache.

A real daemon runs a session of ``turns`` turns (each a ``session_turn`` child calling the
Anthropic Messages API through the real SDK) against the fake API of ``tests/fakes``, which
counts cache writes and reads as the API does (``tests.fakes.cache``: a prefix up to a
breakpoint seen before, within its lifetime, is read; the minimum cacheable length is
1,024 tokens, Sonnet-class).  Each turn sends the whole conversation so far; with the
breakpoints of ``child/providers/anthropic.py`` every turn after the first should read
nearly all of it back.  Goal: at least 80 % of the input tokens read from the cache after
the first turn.  ``python bench/bench_cache.py --turns 20``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command_line, daemon  # noqa: E402
from tests.fakes.anthropic_server import FakeAnthropic  # noqa: E402
from tests.fakes.cache import PromptCache  # noqa: E402

GOAL = 0.80
FILLER = ("Keep the project's notes in mind: the build uses make, tests run with pytest, the docs live in "
          "docs/ and every change is reviewed. ") * 40
"""A system prompt long enough to be cached on its own (about 1,300 fake tokens)."""


def run(turns: int = 20) -> dict[str, Any]:
    """Run the session; returns every request's ``usage`` and the shares."""
    with FakeAnthropic(cache=PromptCache(min_tokens=1024)) as api:
        config = {"provider": "anthropic", "base_url": api.url, "model": "claude-sonnet-4-6", "toolsets": []}
        with daemon(config, env={"ANTHROPIC_API_KEY": "bench-key"}) as d:
            for turn in range(turns):
                reply = d.call("session.send", session="bench", text=f"Turn {turn}: {FILLER if turn == 0 else ''}"
                               f"what is {turn} squared?", cwd=str(d.work))
                d.wait_job(reply["turn"]["id"], timeout=120)
            usages = [r.usage for r in api.requests]
    rows = [{"input": u["input_tokens"], "cache_write": u["cache_creation_input_tokens"],
             "cache_read": u["cache_read_input_tokens"]} for u in usages]
    later = rows[1:]
    total = sum(r["input"] + r["cache_write"] + r["cache_read"] for r in later)
    share = sum(r["cache_read"] for r in later) / total if total else 0.0
    return {"turns": turns, "requests": rows, "read_share_after_first": share}


def report(results: dict[str, Any], args: Any = None) -> str:
    """The figures as text: the share read from the cache after the first turn, and each turn's split."""
    lines = [f"prompt cache over a session of {results['turns']} turns (fake Anthropic API, real SDK):"]
    for n, row in enumerate(results["requests"]):
        whole = row["input"] + row["cache_write"] + row["cache_read"]
        lines.append(f"  turn {n + 1:>2}: {whole:>6} input tokens: {row['cache_read']:>6} read, "
                     f"{row['cache_write']:>5} written, {row['input']:>5} uncached")
    share = results["read_share_after_first"]
    lines.append(f"read from the cache after the first turn: {share:.1%} "
                 f"(goal >= {GOAL:.0%}: {'met' if share >= GOAL else 'NOT met'})")
    return "\n".join(lines)


if __name__ == "__main__":
    command_line(__doc__, run, report, turns=20)
