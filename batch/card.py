"""``README.md`` of a run directory: a Hugging Face dataset card, so the folder loads as it is.

``datasets.load_dataset(RUN_DIR)`` reads a local folder's ``README.md`` YAML
header (https://huggingface.co/docs/hub/datasets-manual-configuration): its
``configs`` name the data files — ``trajectories.jsonl`` (config ``default``,
the merged and filtered samples) and ``batch_*.jsonl`` (config ``batches``,
every written sample) — so ``checkpoint.json`` and ``statistics.json`` are not
read as data; its ``dataset_info`` gives the features (the line schema of
``batch.output``) with the keys whose shape depends on the tools or the dataset
(``tool_stats``, ``tool_error_counts``, ``tools``, ``metadata.extra``) typed
``json`` (``datasets.Json``: stored as JSON text, read back as objects), so
runs with different tool sets, datasets and hermesd versions load with one
schema and concatenate.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from batch import files

NAME = "README.md"
CONFIGS = (("default", "trajectories.jsonl"), ("batches", "batch_*.jsonl"))
"""``(config name, data files)`` of the card."""


def _s(name: str) -> dict[str, str]:
    return {"name": name, "dtype": "string"}


def _dtype(name: str, dtype: str) -> dict[str, str]:
    return {"name": name, "dtype": dtype}


MESSAGE = [_s("role"), _s("content"), _s("reasoning_content"),
           {"name": "tool_calls", "list": [_s("id"), _s("type"),
                                           {"name": "function", "struct": [_s("name"), _s("arguments")]}]},
           _s("tool_call_id"), _s("name")]
"""A model-neutral message (``child.trajectory.to_messages``)."""

FEATURES: list[dict[str, Any]] = [
    _dtype("prompt_index", "int64"),
    {"name": "conversations", "list": [_s("from"), _s("value")]},
    {"name": "metadata", "struct": [
        _dtype("batch_num", "int64"), _s("timestamp"), _s("model"), _dtype("batch", "int64"), _s("run_name"),
        _s("job"), _s("provider"), _s("distribution"), _s("started_at"), _s("completed_at"),
        _dtype("duration_seconds", "float64"), _s("exit_reason"), _dtype("synthetic", "bool"),
        {"name": "tokens", "struct": [_dtype("input", "int64"), _dtype("output", "int64")]},
        _dtype("extra", "json")]},
    _dtype("completed", "bool"), _dtype("partial", "bool"), _dtype("api_calls", "int64"),
    {"name": "toolsets_used", "list": "string"},
    _dtype("tool_stats", "json"), _dtype("tool_error_counts", "json"),
    {"name": "messages", "list": MESSAGE},
    {"name": "tools", "list": "json"},
    {"name": "tool_usage", "list": [_s("name"), _dtype("count", "int64"), _dtype("success", "int64"),
                                    _dtype("failure", "int64")]},
]
"""The features of a trajectory line, in the card's YAML form (``datasets.Features._to_yaml_list``)."""


@functools.lru_cache(maxsize=1)
def header() -> str:
    """The card's YAML header (the same for every run; made once, PyYAML imported then)."""
    import yaml

    data = {"configs": [{"config_name": c, "data_files": [{"split": "train", "path": p}]} for c, p in CONFIGS],
            "dataset_info": [{"config_name": c, "features": FEATURES} for c, _ in CONFIGS]}
    return yaml.safe_dump(data, sort_keys=False)


def text(run_name: str) -> str:
    """The card: the YAML header, then a short description of the files."""
    return (f"---\n{header()}---\n\n# hermesd batch run `{run_name}`\n\n"
            "Agent trajectories written by hermesd's batch job type. `trajectories.jsonl` holds the samples "
            "that passed the filters, `batch_N.jsonl` every sample written; `checkpoint.json` and "
            "`statistics.json` are the run's bookkeeping (not data).\n\n"
            "Each line has Hermes Agent's ShareGPT `conversations` and the model-neutral `messages` "
            "(roles system/user/assistant/tool, structured `tool_calls`, `reasoning_content`) with the "
            "offered `tools` as JSON schemas:\n\n```python\nfrom datasets import load_dataset\n"
            "ds = load_dataset(\"path/to/this/folder\", split=\"train\")\n"
            "text = tokenizer.apply_chat_template(ds[0][\"messages\"], tools=ds[0][\"tools\"], tokenize=False)\n```\n")


def write(run_dir: Path, run_name: str) -> None:
    """Write ``RUN_DIR/README.md`` (atomic) unless it already holds this card.  Raises ``OSError``."""
    card = text(run_name)
    try:
        if (run_dir / NAME).read_text(encoding="utf-8") == card:
            return
    except (OSError, UnicodeDecodeError):
        pass
    files.write_atomic(run_dir / NAME, card)
