"""A session of N turns, with and without compaction: the input tokens of turn N (flat versus
linear) and the share of them read from the prompt cache.

Both sessions run side by side in one run against the fake Messages API, which counts tokens and
the prompt cache as the API does (``tests/fakes/cache.py``: four bytes a token, a prefix up to a
``cache_control`` breakpoint read when it was written before).  Each user message is about
``words`` × 5 bytes; the compacting session compacts past ``limit`` tokens of history.  No goal
is asserted: the figures are printed (``python bench/bench_compaction.py --turns 300``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command_line, daemon, machine  # noqa: E402
from tests.fakes.anthropic_server import FakeAnthropic, Message, last_user_text, text_block  # noqa: E402
from tests.fakes.cache import PromptCache  # noqa: E402

SAMPLES = (1, 2, 10, 50, 100, 200, 300)
"""The turns whose figures are printed (those up to ``turns``, and the last)."""


def _reply(request):
    system = request.body.get("system") or ""
    text = system if isinstance(system, str) else " ".join(b.get("text", "") for b in system)
    if "You are compacting" in text:
        return Message([text_block("Summary: the user sent numbered messages about the weather; nothing is open.")])
    return Message([text_block(f"noted {last_user_text(request)[:12]}")])


def session(turns: int, words: int, limit: int | None) -> list[dict]:
    """The usage of every turn's model call of one session (``limit`` None: never compacted)."""
    cache = PromptCache(min_tokens=256)
    with FakeAnthropic(cache=cache) as api:
        api.default = _reply
        sessions = {"compact_at_tokens": limit or 10**9}
        with daemon({"provider": "anthropic", "base_url": api.url, "model": "claude-bench", "toolsets": [],
                     "sessions": sessions}, env={"ANTHROPIC_API_KEY": "bench-key"}) as d:
            for i in range(turns):
                turn = d.call("session.send", session="s", text=f"message {i}: " + "cloud " * words)["turn"]
                d.wait_job(turn["id"], timeout=300)
        return [request.usage or {} for request in api.requests
                if "You are compacting" not in str(request.body.get("system"))]


def run(turns: int = 300, words: int = 120, limit: int = 8000) -> dict:
    """Both sessions: ``{"plain": [usage…], "compacted": [usage…]}`` (one usage a turn)."""
    return {"plain": session(turns, words, None), "compacted": session(turns, words, limit),
            "turns": turns, "words": words, "limit": limit}


def _total(usage: dict) -> int:
    return int(usage.get("input_tokens", 0)) + int(usage.get("cache_creation_input_tokens", 0)) + \
        int(usage.get("cache_read_input_tokens", 0))


def report(results: dict) -> str:
    """The table: turn, input tokens with and without compaction, and the share read from the cache."""
    lines = [f"## compaction: a session of {results['turns']} turns (~{results['words'] * 6} bytes a message, "
             f"compact_at_tokens {results['limit']}) · {machine()}",
             "| turn | input tokens, never compacted | cache read | input tokens, compacted | cache read |",
             "|---:|---:|---:|---:|---:|"]
    plain, compacted = results["plain"], results["compacted"]
    for n in sorted({s for s in SAMPLES if s <= len(plain)} | {len(plain)}):
        row = [n]
        for usage in (plain[n - 1], compacted[n - 1]):
            total = _total(usage)
            row += [total, f"{100 * int(usage.get('cache_read_input_tokens', 0)) / max(total, 1):.0f} %"]
        lines.append("| " + " | ".join(str(v) for v in row) + " |")
    for name, rows in (("never compacted", plain), ("compacted", compacted)):
        later = rows[1:]
        read = sum(int(u.get("cache_read_input_tokens", 0)) for u in later)
        lines.append(f"{name}: {sum(_total(u) for u in rows)} input tokens in all; after the first turn "
                     f"{100 * read / max(sum(_total(u) for u in later), 1):.1f} % read from the cache")
    return "\n".join(lines)


if __name__ == "__main__":
    command_line(__doc__, run, lambda results, args: report(results), turns=300, words=120, limit=8000)
