"""A batch over the real HumanEval prompts with the Anthropic provider against the
fake Messages API: real thinking blocks become ``<think>``, a reply without
reasoning is discarded, a model that keeps calling a tool it does not have ends
partial; the provider, base URL and batch_runner's run flags are per run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batch import dataset
from tests.fakes.anthropic_server import FakeAnthropic, Message, last_user_text, text_block, thinking_block, \
    tool_use_block
from tests.harness import DATA
from tests.test_batch_daemon import check_consistent, finish, read_run, start

HUMANEVAL = DATA / "humaneval_prompts.jsonl"
pytestmark = pytest.mark.skipif(not HUMANEVAL.is_file(),
                                reason=f"the shared HumanEval prompts are not at {HUMANEVAL} (set HERMES_SHARED)")


def _reply(request) -> Message:
    """The fake model: think, run one command, answer — except for two functions."""
    last = request.body["messages"][-1]["content"]
    if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
        return Message([thinking_block("The command worked."), text_block("The function is written.")])
    prompt = last_user_text(request)
    if "def below_zero" in prompt:
        return Message([text_block("Here it is, no reasoning shown.")])
    if "def truncate_number" in prompt:
        return Message([thinking_block("A special tool will do."), tool_use_block("fly_to_moon", {})],
                       stop_reason="tool_use")
    return Message([thinking_block("I write the function, then check it."),
                    tool_use_block("terminal", {"command": "echo checked"})], stop_reason="tool_use")


def test_humaneval_prompts_all_read():
    data = dataset.read(str(HUMANEVAL))
    assert len(data.prompts) == 164 and data.errors == []
    assert [p.index for p in data.prompts] == list(range(164))


def test_humaneval_batch_with_the_fake_anthropic_server(make_daemon, tmp_path):
    prefill = tmp_path / "prefill.json"
    prefill.write_text(json.dumps([{"role": "user", "content": "PREFILL: answer in Python."},
                                   {"role": "assistant", "content": "Understood."}]))
    with FakeAnthropic() as api:
        api.default = _reply
        daemon = make_daemon({"supervisor": {"max_children": 4}})  # the provider and its URL are the run's
        record = start(daemon, HUMANEVAL, "humaneval", batch_size=3, num_workers=4, max_samples=6,
                       model="claude-fake-1", distribution="no_web", reasoning_effort="low", provider="anthropic",
                       base_url=api.url, ephemeral_system_prompt="EPHEMERAL: be brief.", max_tokens=777,
                       prefill_messages_file=str(prefill))
        final = finish(daemon, record, timeout=180)
    assert final["status"] == "completed", final
    run = read_run(Path(record["run_dir"]))
    check_consistent(run, 3)
    # truncate_number: fly_to_moon three times (never kept), so no reasoning is left: discarded; below_zero too
    assert set(run["checkpoint"]["discarded"]) == {"2", "3"} and run["checkpoint"]["discarded"]["2"]["partial"]
    assert run["checkpoint"]["discarded"]["2"]["reason"] == "invalid_tool_calls"  # not "no reasoning"
    assert run["statistics"]["prompts"]["discarded_invalid_tool_calls"] == 1 == run["statistics"]["prompts"]["discarded_no_reasoning"]
    assert run["statistics"]["filtered"] == {}
    assert [t["prompt_index"] for t in run["trajectories"]] == [0, 1, 4, 5]
    for sent in (r.body for r in api.requests):
        assert sent["system"][0]["text"].endswith("\n\nEPHEMERAL: be brief.") and sent["max_tokens"] == 777 + 2048
        assert sent["messages"][0]["content"][0]["text"] == "PREFILL: answer in Python."
    text = json.dumps(run["trajectories"])
    assert "EPHEMERAL" not in text and "PREFILL" not in text and "Understood." not in text
    line = run["trajectories"][0]
    assert line["metadata"]["model"] == "claude-fake-1" and line["metadata"]["provider"] == "anthropic"
    assert line["metadata"]["synthetic"] is False and line["toolsets_used"] == ["terminal", "file"]
    assert line["conversations"][1]["value"].startswith("Complete the following Python function.")
    assert "<think>\nI write the function, then check it.\n</think>" in line["conversations"][2]["value"]
    assert line["tool_stats"]["terminal"] == {"count": 1, "success": 1, "failure": 0}
    assert run["statistics"]["model"] == "claude-fake-1"
    assert run["statistics"]["tokens"]["input"] > 0 and run["statistics"]["reasoning"]["coverage"] == 0.6667  # 4 of 6
    sent = api.requests[0].body
    assert sent["model"] == "claude-fake-1" and sent["thinking"]["type"] == "enabled"
