"""A job's journal: written step by step by the agent loop, read back and replayed by the next child."""

from __future__ import annotations

import json

import pytest

from child import journal
from hermesd.journal import JournalError, read
from tests.test_agent_loop import assert_well_formed, call, run


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_step_is_journalled_and_a_whole_run_replays_to_its_end(tmp_path):
    path = tmp_path / "journal.jsonl"
    script = [{"tool_calls": [call("terminal", command="echo one")]}, {"text": "done"}]
    result = run(tmp_path, script, journal=str(path))
    assert result.status == "completed"
    kinds = [e["t"] for e in _lines(path)]
    assert kinds == ["message", "message", "tool_started", "tool_result", "message"]
    # the journal of a run that ended is a whole run: a new child ends it at once, without a model call
    again = run(tmp_path, [{"error": "no model call expected"}], journal=str(path))
    assert again.status == "completed" and again.summary == "done"
    assert again.api_calls == result.api_calls == 2 and again.tokens == result.tokens
    assert again.messages == result.messages


def test_a_tool_call_cut_off_by_a_crash_is_reported_interrupted_and_the_run_goes_on(tmp_path):
    path = tmp_path / "journal.jsonl"
    script = [{"tool_calls": [call("read_file", path="a.txt"), call("terminal", command="echo side effect")]},
              {"text": "done"}]
    first = run(tmp_path, script, journal=str(path))
    entries = _lines(path)
    # the crash came while the terminal command ran: its start is journalled, its result is not
    cut = next(i for i, e in enumerate(entries) if e["t"] == "tool_started" and e["name"] == "terminal")
    path.write_text("".join(json.dumps(e) + "\n" for e in entries[:cut + 1]) + '{"t": "tool_res')  # a torn line
    (tmp_path / "a.txt").write_text("read again\n")
    resumed = run(tmp_path, script, journal=str(path))  # the script goes on at its second step
    assert resumed.status == "completed" and resumed.summary == "done"
    assert resumed.api_calls == first.api_calls == 2
    results = {b["tool_use_id"]: b for b in resumed.messages[2]["content"]}
    read_call, shell_call = (c["id"] for c in resumed.messages[1]["content"] if c["type"] == "tool_use")
    assert "read again" not in results[read_call]["content"]  # its result was journalled: not run again
    assert results[shell_call]["is_error"] and results[shell_call]["content"] == journal.INTERRUPTED
    assert_well_formed(resumed.messages)
    # the torn line was cut off before the new child wrote: its journal still reads, to the end
    assert [e["t"] for e in read(path)][cut:] == ["tool_started", "message"]


def test_a_repeatable_tool_cut_off_runs_again(tmp_path):
    path = tmp_path / "journal.jsonl"
    script = [{"tool_calls": [call("read_file", path="a.txt")]}, {"text": "done"}]
    (tmp_path / "a.txt").write_text("first\n")
    run(tmp_path, script, journal=str(path))
    entries = _lines(path)
    cut = next(i for i, e in enumerate(entries) if e["t"] == "tool_started")
    path.write_text("".join(json.dumps(e) + "\n" for e in entries[:cut + 1]))
    (tmp_path / "a.txt").write_text("second\n")
    resumed = run(tmp_path, script, journal=str(path))
    assert "second" in resumed.messages[2]["content"][0]["content"]


def test_a_journal_missing_or_bad_in_the_middle_is_an_error_naming_it(tmp_path):
    path = tmp_path / "journal.jsonl"
    with pytest.raises(JournalError, match="missing"):
        read(path)
    path.write_text('{"t": "message", "message": {"role": "user", "content": []}}\nnot json\n{"t": "note"}\n')
    with pytest.raises(JournalError, match=r"journal.jsonl:2: not JSON"):
        read(path)
    path.write_text('{"t": "nothing"}\n')
    with pytest.raises(JournalError, match=r":1: not a journal entry"):
        read(path)
    path.write_text("")
    assert read(path) == [] and journal.replay(str(path), lambda name: False) is None
