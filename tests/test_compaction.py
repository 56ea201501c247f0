"""A session that lives for months: what a turn is sent stays bounded (the real SDK against the
fake Messages API, which counts tokens as the API does and refuses a request over its window).

Also what a long run sends: older tool results shortened (:mod:`child.window`)."""

from __future__ import annotations

import pytest

from child import messages as m
from child.window import MARKER, Window, shortened
from hermesd.contract.providers import context_window
from hermesd.contract.tokens import estimate_tokens
from tests.fakes.anthropic_server import FakeAnthropic, Message, last_user_text, text_block, tool_use_block
from tests.fakes.limits import Limits, count_input_tokens
from tests.harness import wait_for

COMPACTING = "You are compacting"  # a phrase of the compaction's instructions
WINDOW = 6000  # the fake model's context window (tokens)
LIMIT = 1500  # sessions.compact_at_tokens of the tests


def _system(request) -> str:
    system = request.body.get("system") or ""
    return system if isinstance(system, str) else " ".join(b.get("text", "") for b in system)


class Model:
    """The fake model: a turn answers briefly; a compaction answers with a summary naming the
    last fact it read (so the test sees the summary reach the next turn)."""

    def __init__(self):
        self.compactions = 0

    def __call__(self, request):
        if COMPACTING in _system(request):
            self.compactions += 1
            facts = [w for w in last_user_text(request).split() if w.startswith("fact-")]
            return Message([text_block(f"SUMMARY-{self.compactions}: the user said {' '.join(facts[-3:])}")])
        return Message([text_block(f"ok: {last_user_text(request)[-40:]}")])


def _daemon(make_daemon, api, **sessions):
    return make_daemon({"provider": "anthropic", "base_url": api.url, "model": "claude-test", "toolsets": [],
                        "sessions": {"compact_at_tokens": LIMIT, "keep_recent_tokens": 400, **sessions}},
                       env={"ANTHROPIC_API_KEY": "test-key"})


def _send(d, text, session="main"):
    turn = d.call("session.send", session=session, text=text)["turn"]
    rec = d.wait_job(turn["id"], timeout=60)
    assert rec["status"] == "completed", rec
    return rec


def _history_tokens(request) -> int:
    """The tokens of what a turn's request carries of the session: its messages, as the fake counts."""
    return count_input_tokens({"messages": request.body["messages"]})


def _turn_requests(api):
    return [r for r in api.requests if COMPACTING not in _system(r)]


def test_the_history_is_compacted_past_the_limit_and_stays_below_it(make_daemon):
    model = Model()
    with FakeAnthropic(limits=Limits(context_window=WINDOW)) as api:
        api.default = model
        d = _daemon(make_daemon, api)
        for i in range(14):  # ~300 tokens a message: the limit is passed every few turns
            _send(d, f"fact-{i} " + "words of a long message " * 50)
        assert model.compactions >= 2
        sizes = [_history_tokens(r) for r in _turn_requests(api)]
        first = next(i for i, r in enumerate(_turn_requests(api)) if "SUMMARY-" in str(r.body["messages"]))
        assert max(sizes[first:]) <= LIMIT + 600, sizes  # the limit, plus the turn being sent
        assert sizes[-1] < sizes[first - 1] + 200, sizes  # flat, not growing
        last = _turn_requests(api)[-1].body["messages"]
        assert f"SUMMARY-{model.compactions}" in str(last[0]), last[0]  # the summary reaches the turn
        history = d.call("session.history", session="main")
        assert len(history["messages"]) == 28  # every message kept
        assert len(history["compactions"]) == model.compactions
        ids = [msg["id"] for msg in history["messages"]]
        assert all(c["upto"] in ids and c["tokens_after"] < c["tokens_before"] for c in history["compactions"])
        shown = d.call("session.get", session="main")
        assert shown["sent_tokens"] <= LIMIT and shown["compact_at_tokens"] == LIMIT
        events = d.call("events_since", since=0, types=["session.compacted"])["events"]
        assert len(events) == model.compactions


def test_compact_on_request_and_the_prefix_stays_stable_until_the_next(make_daemon):
    model = Model()
    with FakeAnthropic() as api:
        api.default = model
        d = _daemon(make_daemon, api, compact_at_tokens=100000)
        for i in range(4):
            _send(d, f"fact-{i} hello " + "and some more words " * 20)
        sent = d.ctl("send", "main", "/compact", "--wait")  # returns when the compaction has ended
        assert sent.returncode == 0 and sent.stdout.startswith("session main: compacted by "), sent
        rec = d.wait_job(sent.stdout.split()[4].rstrip(":"))
        assert rec["status"] == "completed" and rec["kind"] == "session_compact"
        _send(d, "after one")
        _send(d, "after two")
        one, two = _turn_requests(api)[-2:]
        assert "SUMMARY-1" in str(one.body["messages"][0])
        assert one.body["messages"][0] == two.body["messages"][0]  # the same bytes: the cache holds
        out = d.ctl("history", "main")
        assert "compacted" in out.stdout, out.stdout


def test_a_failed_compaction_leaves_the_session_as_it_was_and_the_turn_runs(make_daemon):
    with FakeAnthropic() as api:
        def model(request):
            if COMPACTING in _system(request):
                from tests.fakes.anthropic_server import Error
                return Error(400, "invalid request for the test", type="invalid_request_error")
            return Message([text_block("ok")])
        api.default = model
        d = _daemon(make_daemon, api, compact_at_tokens=300, keep_recent_tokens=100)
        for i in range(4):
            _send(d, f"fact-{i} " + "long words " * 40)
        failed = d.call("events_since", since=0, types=["session.compaction_failed"])["events"]
        assert failed and "invalid request" in failed[0]["data"]["error"]
        assert d.call("session.history", session="main")["compactions"] == []
        assert len(d.call("session.history", session="main")["messages"]) == 8


@pytest.mark.slow  # over 10 s: the default run stays short; .ci/run runs it
def test_a_completion_arriving_during_a_compaction_is_delivered_once_after_it(make_daemon):
    with FakeAnthropic() as api:
        order = []

        def model(request):
            system = _system(request)
            if COMPACTING in system:
                order.append("compaction")
                return Message([text_block("SUMMARY: earlier talk")], event_delay=0.4)  # ~2 s streamed
            text = last_user_text(request)
            if "persistent agent" not in system:
                return Message([text_block("child done")])
            if "[Async delegation" in text:
                order.append("delivery")
            return Message([text_block("noted")])
        api.default = model
        d = _daemon(make_daemon, api, compact_at_tokens=100000)
        for i in range(3):
            _send(d, f"fact-{i} hi")
        compaction = d.call("session.send", session="main", text="/compact")["compaction"]
        wait_for(lambda: d.call("job", id=compaction["id"])["status"] == "running", what="compaction running")
        bg = d.call("session.send", session="main", text="/background look something up")
        d.wait_job(bg["delegation_id"], timeout=60)
        wait_for(lambda: "delivery" in order, timeout=60, what="the completion delivered")
        assert order.index("compaction") < order.index("delivery")
        turns = d.call("ps", kinds=["session_turn"], all=True)["jobs"]
        wait_for(lambda: all(t["status"] == "completed" for t in d.call("ps", kinds=["session_turn"], all=True)["jobs"]))
        delivered = [msg for msg in d.call("session.history", session="main")["messages"] if msg["notification"]]
        assert [msg["notification"] for msg in delivered] == [bg["delegation_id"]]
        assert turns


# -- inside one job: old tool results shortened in what is sent -------------------------------


def _conversation(rounds: int, size: int = 4000) -> list[dict]:
    msgs = [m.user("go")]
    for i in range(rounds):
        call = {"type": "tool_use", "id": f"t{i}", "name": "terminal", "input": {"command": f"cat f{i}"}}
        msgs.append(m.assistant([call]))
        msgs.append(m.user(m.tool_result(f"t{i}", f"out{i} " + "x" * size)))
    return msgs


def test_older_tool_results_are_shortened_and_the_prefix_moves_seldom():
    window = Window(20000)  # shortens past 10,000 estimated tokens
    msgs = _conversation(5)
    assert window.view(msgs) == msgs  # small: all whole
    msgs = _conversation(12)
    sent = window.view(msgs)
    assert estimate_tokens(sent) < estimate_tokens(msgs)
    results = [x for x in sent if x["role"] == "user" and x["content"][0].get("type") == "tool_result"]
    assert all(r["content"][0]["content"].startswith(MARKER.split("{")[0]) for r in results[:-3])
    assert all(len(r["content"][0]["content"]) > 4000 for r in results[-3:])  # the last rounds whole
    assert msgs[2]["content"][0]["content"].startswith("out0 ")  # the run's own messages untouched
    cut = window.cut
    more = _conversation(13)
    assert window.view(more)[:cut] == sent[:cut] and window.cut == cut  # a byte-stable prefix
    assert shortened(more, cut)[:cut] == sent[:cut]


def test_context_windows_known_per_model():
    assert context_window("claude-sonnet-4-6") == 200_000
    assert context_window("gpt-4o-mini") == 128_000
    assert context_window("my-model", {"my-": 32_000}) == 32_000
    assert context_window(None) == 128_000


def test_the_configured_context_window_of_a_model_sets_the_limits_of_sessions_and_of_jobs(make_daemon):
    def model(request):  # eight rounds of 4,000-byte tool results: more than the fake's window, unshortened
        rounds = sum(1 for msg in request.body["messages"] if msg["role"] == "assistant")
        if rounds < 8:
            command = f"head -c 4000 /dev/zero | tr '\\0' {'abcdefgh'[rounds]}"
            return Message([tool_use_block("terminal", {"command": command})], stop_reason="tool_use")
        return Message([text_block("done")])

    with FakeAnthropic(limits=Limits(context_window=WINDOW)) as api:
        api.default = model
        d = make_daemon({"provider": "anthropic", "base_url": api.url, "model": "claude-test", "toolsets": ["terminal"],
                         "context_windows": {"claude-": 100_000, "claude-te": WINDOW}},  # the longest prefix wins
                        env={"ANTHROPIC_API_KEY": "test-key"})
        rec = d.wait_job(d.delegate("read eight files")["id"], timeout=120)
        assert rec["status"] == "completed", rec  # unshortened, the fake refuses the eighth request
        assert any(MARKER.split("{")[0] in str(r.body["messages"]) for r in api.requests)  # the child shortened
        assert max(count_input_tokens(r.body) for r in api.requests) <= WINDOW
        d.call("session.send", session="main", text="hello")
        assert d.call("session.get", session="main")["compact_at_tokens"] == int(0.6 * WINDOW)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # 300 turns and their compactions, each a child: minutes on 2 cores
def test_three_hundred_turns_stay_within_the_window(make_daemon):
    model = Model()
    with FakeAnthropic(limits=Limits(context_window=WINDOW)) as api:
        api.default = model
        d = _daemon(make_daemon, api)
        for i in range(300):
            _send(d, f"fact-{i} " + "words of a long message " * 12)
        assert len(_turn_requests(api)) == 300
        assert max(count_input_tokens(r.body) for r in api.requests) <= WINDOW  # none refused either
        sizes = [_history_tokens(r) for r in _turn_requests(api)]
        first = next(i for i, r in enumerate(_turn_requests(api)) if "SUMMARY-" in str(r.body["messages"]))
        assert max(sizes[first:]) <= LIMIT + 600
        assert len(d.call("session.history", session="main")["messages"]) == 600  # every message kept


def test_a_session_without_a_cwd_keeps_one_directory_so_its_prefix_is_cached(make_daemon):
    from tests.fakes.cache import PromptCache

    with FakeAnthropic(cache=PromptCache(min_tokens=256)) as api:
        d = _daemon(make_daemon, api)
        for i in range(3):
            rec = d.wait_job(d.call("session.send", session="nocwd", text=f"hello {i} " + "w " * 300)["turn"]["id"])
            assert rec["status"] == "completed", rec
        systems = {str(r.body.get("system")) for r in api.requests}
        assert len(systems) == 1  # the working directory it names is the session's, every turn
        last = api.requests[-1].usage
        total = last["input_tokens"] + last["cache_creation_input_tokens"] + last["cache_read_input_tokens"]
        assert last["cache_read_input_tokens"] > 0.8 * total, last


def test_a_summary_longer_than_what_it_replaces_is_not_kept(make_daemon):
    with FakeAnthropic() as api:
        api.default = lambda r: Message([text_block(("a very long summary " * 200) if COMPACTING in _system(r) else "ok")])
        d = _daemon(make_daemon, api, compact_at_tokens=100000)
        for i in range(3):
            _send(d, f"fact-{i} hi")
        rec = d.wait_job(d.call("session.compact", session="main")["compaction"]["id"], timeout=60)
        assert rec["status"] == "completed"
        failed = d.call("events_since", since=0, types=["session.compaction_failed"])["events"]
        assert failed and "no shorter" in failed[0]["data"]["error"]
        assert d.call("session.history", session="main")["compactions"] == []
