"""Batch job type, without a daemon: dataset reading, distributions, durable files,
trajectory lines, filters, checkpoint and statistics."""

from __future__ import annotations

import json

import pytest

from batch import dataset, distributions, files, statistics, trajectories
from batch.line import build_line
from batch.checkpoint import Checkpoint, CheckpointError
from batch.settings import Settings
from child.tools.registry import known_tool_names
from hermesd.contract.toolsets import TOOLSETS


def test_known_tools_match_the_child_registry():
    assert list(trajectories.KNOWN_TOOLS) == known_tool_names()


# dataset ------------------------------------------------------------------


def test_bad_lines_are_reported_with_file_and_line_and_skipped(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    path = tmp_path / "ds.jsonl"
    path.write_bytes(b"\n".join([
        b'{"prompt": "first"}',
        b"{not json",
        b'{"text": "no prompt"}',
        b'{"prompt": 42}',
        b"",
        b'["a list"]',
        b'{"prompt": "   "}',
        b'{"prompt": "with cwd", "cwd": "work", "task_id": "T/1"}',
        b'{"prompt": "bad cwd", "cwd": "/nonexistent/dir"}',
        b'{"prompt": "bad image", "docker_image": 3}',
        b'{"prompt": "bad script", "script": "x"}',
        b'{"prompt": "\xff"}',
        b'{"prompt": "last"}\r',
    ]) + b"\n")
    data = dataset.read(str(path))
    assert [(p.index, p.prompt) for p in data.prompts] == [(0, "first"), (7, "with cwd"), (12, "last")]
    assert data.prompts[1].cwd == str(work)
    expected = {2: "invalid JSON", 3: "missing field 'prompt'", 4: "field 'prompt' must be a string, not int",
                5: "empty line", 6: "expected a JSON object, got list", 7: "field 'prompt' is empty",
                9: "does not exist", 10: "field 'docker_image' must be a string", 11: "field 'script'",
                12: "not UTF-8"}
    assert len(data.errors) == len(expected)
    for message, (line, reason) in zip(data.errors, sorted(expected.items())):
        assert message.startswith(f"{path}:{line}: ") and reason in message, message


def test_max_samples_counts_usable_prompts_and_a_missing_file_is_an_error(tmp_path):
    path = tmp_path / "ds.jsonl"
    path.write_text('oops\n{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": "c"}')
    data = dataset.read(str(path), max_samples=2)
    assert [p.index for p in data.prompts] == [1, 2] and len(data.errors) == 1
    with pytest.raises(dataset.DatasetError, match="missing.jsonl: cannot read"):
        dataset.read(str(tmp_path / "missing.jsonl"))


# distributions ---------------------------------------------------------------


def test_distributions_name_only_known_toolsets_and_draw_deterministically():
    for probs in distributions.DISTRIBUTIONS.values():
        assert set(probs) <= set(TOOLSETS) and all(0 < p <= 1 for p in probs.values())
    draws = [distributions.sample("balanced", i) for i in range(200)]
    assert draws == [distributions.sample("balanced", i) for i in range(200)]
    assert all(d for d in draws) and len({tuple(d) for d in draws}) > 3
    assert distributions.sample("default", 5) == ["terminal", "file", "web"]
    with pytest.raises(distributions.UnknownDistribution, match="unknown distribution 'nope'; known: default"):
        distributions.sample("nope", 0)


def test_the_most_probable_toolset_is_used_when_none_is_drawn(monkeypatch):
    monkeypatch.setitem(distributions.DISTRIBUTIONS, "rare", {"terminal": 0.01, "web": 0.02})
    assert distributions.most_probable("rare") == "web"
    draws = [distributions.sample("rare", i) for i in range(100)]
    assert draws.count(["web"]) >= 90


# durable files -----------------------------------------------------------------


def test_a_torn_last_line_is_truncated_and_complete_lines_kept(tmp_path):
    path = tmp_path / "batch_0.jsonl"
    files.append_line(path, {"prompt_index": 0})
    files.append_line(path, {"prompt_index": 1})
    whole = path.read_bytes()
    with open(path, "ab") as fh:
        fh.write(b'{"prompt_index": 2, "conver')
    entries, problems = files.read_jsonl(path)
    assert [e["prompt_index"] for e in entries] == [0, 1] and "torn last line" in problems[0]
    assert path.read_bytes() != whole  # reading alone repairs nothing
    entries, problems = files.read_jsonl(path, repair=True)
    assert path.read_bytes() == whole and problems[0].startswith(f"{path}:3: torn last line")


def test_write_atomic_replaces_the_whole_file(tmp_path):
    path = tmp_path / "checkpoint.json"
    files.write_json(path, {"a": 1})
    files.write_json(path, {"b": 2})
    assert json.loads(path.read_text()) == {"b": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.json"]


# lines, filters, merge, statistics -------------------------------------------------


TERMINAL_ONLY = [{"type": "function", "function": {"name": "terminal", "description": "", "parameters": {}}}]


def _line(index, *, think=True, tools=(), trace=(), completed=True, partial=False, tokens=(10, 5), raw="",
          synthetic=False, offered=TERMINAL_ONLY):
    gpt = ("<think>\nI plan it.\n</think>\n" if think else "<think>\n</think>\n") + "answer" + raw
    for name in tools:
        gpt += "\n<tool_call>\n" + json.dumps({"name": name, "arguments": {}}) + "\n</tool_call>"
    conversations = [{"from": "system", "value": "s"}, {"from": "human", "value": f"p{index}"},
                     {"from": "gpt", "value": gpt}]
    return build_line(index=index, batch=index // 2, trajectory={"conversations": conversations,
                                                                 "tools": offered},
                      completed=completed, partial=partial, api_calls=2, toolsets=["terminal"],
                      trace=list(trace), extra={"task_id": f"T/{index}"},
                      metadata={"model": None, "tokens": {"input": tokens[0], "output": tokens[1]},
                                "duration_seconds": 1.5, "synthetic": synthetic})


def test_a_line_has_one_schema_whatever_is_missing():
    line = _line(3, trace=[{"name": "terminal", "ok": True}, {"name": "terminal", "ok": False},
                           {"name": "fly", "ok": False}])
    from batch.line import LINE

    assert list(line) == [k.name for k in LINE]  # every key, also those the sample left empty
    assert (line["group_id"], line["attempt"], line["reward"], line["verifier"]) == (3, 0, None, None)
    assert line["metadata"]["model"] == "" and line["metadata"]["batch"] == line["metadata"]["batch_num"] == 1
    assert line["metadata"]["extra"] == {"task_id": "T/3"}
    assert line["tool_error_counts"]["terminal"] == 1 and list(line["tool_error_counts"]) == list(trajectories.KNOWN_TOOLS)
    assert line["tool_usage"] == [{"name": "terminal", "count": 2, "success": 1, "failure": 1}]
    assert list(line["tool_stats"]) == list(trajectories.KNOWN_TOOLS)
    assert line["tool_stats"]["terminal"] == {"count": 2, "success": 1, "failure": 1}
    assert line["tool_stats"]["read_file"] == {"count": 0, "success": 0, "failure": 0}


def test_the_writer_and_the_card_follow_the_one_declaration():
    """The line's keys, the card's features and the docs' key list all come from batch.line.LINE:
    same keys, same order, nested keys included; every key written has a meaning in the docs."""
    from batch import card, line as declared

    written = _line(1)
    assert list(written) == [k.name for k in declared.LINE] == [f["name"] for f in card.FEATURES]
    metadata = next(f for f in card.FEATURES if f["name"] == "metadata")
    assert list(written["metadata"]) == [f["name"] for f in metadata["struct"]]
    documented = {key for key, _, _ in declared.reference()}
    assert {*written, *(f"metadata.{k}" for k in written["metadata"])} <= documented


def test_filters_check_the_tools_each_sample_was_offered():
    assert trajectories.filter_reason(_line(0, tools=["terminal"])) is None
    assert trajectories.filter_reason(_line(0, tools=["web_search"])) == ("tool_not_offered", ["web_search"])  # known, not offered
    bad = '\n<tool_call>\n{"name": "terminal", "arguments": {oops}\n</tool_call>'
    assert trajectories.filter_reason(_line(0, raw=bad)) == ("unparseable_tool_call", [])
    assert trajectories.filter_reason(_line(0, synthetic=True)) == ("synthetic", [])
    assert trajectories.filter_reason(_line(0, synthetic=True), allow_synthetic=True) is None
    assert trajectories.filter_reason(_line(0, partial=True, completed=False)) is None
    assert trajectories.filter_reason(_line(0, partial=True, completed=False), exclude_partial=True) == ("partial", [])
    old = _line(0, tools=["web_search"])
    del old["tools"]  # a line of an older version: every known tool counts as offered
    assert trajectories.filter_reason(old) is None


def test_reasoning_means_a_scratchpad_or_a_think_block_of_real_text():
    assert trajectories.shows_reasoning("<think>\nI plan it.\n</think>\nx")
    assert trajectories.shows_reasoning("<REASONING_SCRATCHPAD>first the tests</REASONING_SCRATCHPAD> then")
    assert not trajectories.shows_reasoning("<think>\n</think>\nanswer")
    for forced in ("...", "False", "has_close_elements", "?? !!", "42 17"):  # what a grammar forces
        assert not trajectories.shows_reasoning(f"<think>\n{forced}\n</think>\nanswer"), forced
    call = '<tool_call>\n{"name": "terminal", "arguments": {"command": "python3 -c print(1)"}}\n</tool_call>'
    assert not trajectories.shows_reasoning(f"<think>\npython3 -c print(1)\n</think>\n{call}")  # a copied argument
    assert trajectories.shows_reasoning(f"<think>\nI run it: python3 -c print(1)\n</think>\n{call}")
    assert not trajectories.shows_reasoning("<REASONING_SCRATCHPAD>ok</REASONING_SCRATCHPAD> a long answer here")


def test_merge_keeps_known_tools_only_and_statistics_count_the_files(tmp_path):
    lines = {0: _line(0, tools=["terminal"], trace=[{"name": "terminal", "ok": True}]),
             1: _line(1, tools=["fly_to_moon"]), 3: _line(3, completed=False)}
    spans = {index: files.append_line(trajectories.batch_file(tmp_path, index // 2), line) for index, line in lines.items()}
    read, problems = trajectories.read_lines(tmp_path)
    assert {i: line for i, line, _ in read} == lines and problems == []
    written = {i: where for i, _, where in read}
    assert {i: (w.number, w.start, w.end) for i, w in written.items()} == {
        i: (i // 2, *spans[i]) for i in lines}  # where the appends said they wrote
    tally = statistics.Tally()
    for index, line in lines.items():  # as a run counts them, in the order they were written
        tally.add(line)
    merged = trajectories.merge(tmp_path, written)
    assert merged.filtered == {1: {"reason": "tool_not_offered", "tools": ["fly_to_moon"]}}
    text = (tmp_path / "trajectories.jsonl").read_text()  # the lines as written, byte for byte
    assert text == "".join(files.dumps(lines[i]) + "\n" for i in (0, 3))
    ckpt = Checkpoint(tmp_path)
    ckpt.done = set(lines)
    ckpt.discarded = {2: {"reason": "no_reasoning", "api_calls": 1, "tokens": {"input": 7, "output": 1},
                          "duration_seconds": 0.5}}
    ckpt.failed = {4: {"error": "boom", "api_calls": 0, "tokens": {}}}
    settings = Settings(run_name="r", dataset_file="/d", output_dir=str(tmp_path), batch_size=2).to_dict()
    stats = statistics.compute(settings=settings, job="batch_r", scope={0, 1, 2, 3, 4, 5}, bad_lines=1,
                               tally=tally, merged=merged, checkpoint=ckpt)
    assert stats["prompts"] == {"total": 6, "bad_lines": 1, "written": 3, "completed": 2, "partial": 0,
                                "incomplete": 1, "discarded_no_reasoning": 1, "discarded_invalid_tool_calls": 0,
                                "filtered_invalid_tools": 1,
                                "filtered_tool_not_offered": 1, "filtered_unparseable_tool_call": 0,
                                "filtered_synthetic": 0, "filtered_partial": 0, "filtered_below_min_reward": 0,
                                "in_trajectories": 2, "failed": 1, "pending": 1}
    assert stats["rewards"]["verified"] == 0 and stats["groups"]["pass@1"] is None
    # Hermes' keys, with Hermes' meanings (rates in percent)
    assert {k: stats[k] for k in ("run_name", "total_prompts", "total_batches", "batch_size")} == {
        "run_name": "r", "total_prompts": 6, "total_batches": 3, "batch_size": 2}
    assert stats["tool_statistics"] == {"terminal": {"count": 1, "success": 1, "failure": 0, "success_rate": 100.0,
                                                     "failure_rate": 0.0}}
    assert stats["reasoning_statistics"] == {"total_assistant_turns": 3, "turns_with_reasoning": 3,
                                             "turns_without_reasoning": 0}
    assert {"distribution", "model", "completed_at", "duration_seconds"} <= set(stats)
    assert stats["tool_stats"]["terminal"]["success_rate"] == 1.0 and stats["tool_calls"]["total"] == 1
    assert stats["tokens"] == {"input": 37, "output": 16, "total": 53}
    assert stats["api_calls"] == 7
    assert stats["reasoning"]["coverage"] == 0.75 and stats["reasoning"]["turn_coverage"] == 1.0
    assert stats["duration"]["prompt_seconds_total"] == 5.0


def test_repeated_indices_keep_the_first_line(tmp_path):
    files.append_line(trajectories.batch_file(tmp_path, 0), _line(0, tokens=(1, 1)))
    files.append_line(trajectories.batch_file(tmp_path, 0), _line(0, tokens=(2, 2)))
    read, problems = trajectories.read_lines(tmp_path)
    assert [line["metadata"]["tokens"]["input"] for _, line, _ in read] == [1] and "appears again" in problems[0]


def test_checkpoint_round_trip_and_corruption(tmp_path):
    ckpt = Checkpoint(tmp_path)
    ckpt.done, ckpt.discarded, ckpt.failed = {3, 1}, {2: {"reason": "no_reasoning"}}, {5: {"error": "x"}}
    ckpt.settings, ckpt.skipped = {"batch_size": 2}, {1}
    ckpt.save()
    again = Checkpoint.load(tmp_path)
    assert (again.done, again.discarded, again.failed) == ({1, 3}, {2: {"reason": "no_reasoning"}}, {5: {"error": "x"}})
    assert again.settled() == {1, 2, 3}
    data = json.loads((tmp_path / "checkpoint.json").read_text())  # Hermes' keys
    assert data["completed_prompts"] == [1, 2, 3] and data["last_updated"] and data["run_name"] == ""
    assert data["batch_stats"] == {"0": {"processed": 0, "skipped": 1, "discarded_no_reasoning": 0},
                                   "1": {"processed": 2, "skipped": 0, "discarded_no_reasoning": 1},
                                   "2": {"processed": 1, "skipped": 0, "discarded_no_reasoning": 0}}
    (tmp_path / "checkpoint.json").write_text("{broken")
    with pytest.raises(CheckpointError, match="checkpoint.json: cannot read"):
        Checkpoint.load(tmp_path)
    assert Checkpoint.load(tmp_path / "nowhere") is None


def test_reasoning_disabled_means_effort_none():
    s = Settings(run_name="r", dataset_file="/d", output_dir="/o", batch_size=10, reasoning_effort="high")
    assert s.effort == "high" and Settings(**{**s.to_dict(), "reasoning_disabled": True}).effort == "none"


def test_resume_conflicts_name_the_fixed_settings():
    s = Settings(run_name="r", dataset_file="/d", output_dir="/o", batch_size=10)
    assert s.conflicts({**s.to_dict(), "num_workers": 9}) == []
    assert s.conflicts({**s.to_dict(), "batch_size": 5}) == ["--batch_size 10 differs from the run's checkpoint (5)"]
