"""``README.md`` of a run directory: a Hugging Face dataset card, so the folder loads as it is.

``datasets.load_dataset(RUN_DIR)`` reads a local folder's ``README.md`` YAML
header (https://huggingface.co/docs/hub/datasets-manual-configuration): its
``configs`` name the data files, so ``checkpoint.json`` and ``statistics.json``
are not read as data, and its ``dataset_info`` gives each config's features:

* ``default``: ``messages.jsonl``, the model-neutral view of the samples kept
  (:mod:`batch.view`: ``messages``, ``tools``, scores, metadata — no
  ``conversations``), what TRL and axolotl read as it is; every key of a plain
  type, so it loads on every ``datasets`` release from 3.0;
* ``hermes``: ``trajectories.jsonl``, Hermes' full lines of the samples kept, and
  ``batches``: ``batch_*.jsonl``, every written sample — without features in the card
  (see :data:`CONFIGS`); their declared features (:data:`FEATURES`, from the line's
  declaration :data:`batch.line.LINE`) type the keys whose shape depends on the tools
  or the dataset ``json`` (``datasets.Json``, from ``datasets`` 4.7: stored as JSON
  text, read back as objects), so with them runs with different tool sets, datasets
  and hermesd versions load with one schema and concatenate.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from batch import files, line, view

NAME = "README.md"
FEATURES: list[dict[str, Any]] = line.features()
"""The features of a trajectory line, in the card's YAML form (``datasets.Features._to_yaml_list``),
derived from its declaration (:data:`batch.line.LINE`)."""

CONFIGS = (("default", view.NAME, view.features()), ("hermes", "trajectories.jsonl", None),
           ("batches", "batch_*.jsonl", None))
"""``(config name, data files, features)`` of the card.  Hermes' lines have none in the card:
their ``json`` keys (:data:`FEATURES`) are a type ``datasets`` has only from 4.7, and an older one
fails on the whole card when any config names it; there ``datasets`` infers their features, and
with 4.7 or newer ``features=datasets.Features._from_yaml_list(FEATURES)`` loads them typed."""


EMPTY = ("**This run kept no sample** (`statistics.json` says why). `datasets` refuses to load an empty split "
         "(`Instruction \"train\" corresponds to no data`); `load_dataset(\"path/to/this/folder\", split=\"train\", "
         "streaming=True)` gives the declared features and no row.\n\n")
"""Said first in the card of a finished run whose default config has no line."""

Sizes = dict[str, tuple[int, int]]
"""Per config name: ``(lines, bytes)`` of its data files (:func:`sizes_of`)."""


@functools.lru_cache(maxsize=4)
def header(sizes: tuple[tuple[str, int, int], ...] = ()) -> str:
    """The card's YAML header; with ``sizes`` (``(config, lines, bytes)``…) each config's
    ``dataset_info`` also gives its ``download_size``, the bytes of its data files.

    That is what makes ``datasets`` tell two loads apart: it keys its cache of a local folder
    with a ``configs`` block by the folder's name and that block, not by the files, so without
    it another run of the same name, or this folder after a resume, is served from the cache
    of an earlier load (``datasets`` 5.2).  No ``splits``: ``datasets`` wants ``num_bytes`` of
    the prepared (Arrow) split there, which only it knows, warns when it is missing, and would
    refuse the folder once a file was edited (it checks ``num_examples``).  PyYAML is imported
    here, when first needed.
    """
    import yaml

    counted = {name: (lines, size) for name, lines, size in sizes}
    info = []
    for name, _, features in CONFIGS:
        entry: dict[str, Any] = {"config_name": name, **({"features": features} if features else {})}
        if name in counted:
            entry["download_size"] = counted[name][1]
        info.append(entry)
    data = {"configs": [{"config_name": c, "data_files": [{"split": "train", "path": p}]} for c, p, _ in CONFIGS],
            "dataset_info": info}
    return yaml.safe_dump(data, sort_keys=False)


def sizes_of(run_dir: Path) -> Sizes:
    """Lines and bytes of each config's data files in ``run_dir`` (what ``datasets`` reads)."""
    out = {}
    for name, pattern, _ in CONFIGS:
        lines = size = 0
        for path in sorted(run_dir.glob(pattern)):
            with open(path, "rb") as fh:  # in blocks: a run's files may be larger than memory should hold
                for block in iter(lambda: fh.read(1 << 20), b""):
                    lines += block.count(b"\n")
                    size += len(block)
        out[name] = (lines, size)
    return out


def text(run_name: str, sizes: Sizes | None = None) -> str:
    """The card: the YAML header (with the data files' ``sizes`` once the run is finished),
    then a short description of the files (after :data:`EMPTY` when the run kept no sample)."""
    key = tuple((name, lines, size) for name, (lines, size) in sorted((sizes or {}).items()))
    empty = (sizes or {}).get("default", (None, 0))[0] == 0
    return (f"---\n{header(key)}---\n\n# hermesd batch run `{run_name}`\n\n" + (EMPTY if empty else "") +
            "Agent trajectories written by hermesd's batch job type. The default config, `messages.jsonl`, is "
            "the model-neutral view of the samples that passed the filters — `messages` (roles "
            "system/user/assistant/tool, structured `tool_calls`, `reasoning_content`), `tools` (the offered "
            "tools' JSON schemas, as JSON text), `reward`, `passed`, `group_id`, `metadata` — what TRL's "
            "SFTTrainer and axolotl read as it is. Config `hermes` is `trajectories.jsonl` (Hermes Agent's "
            "full lines, with ShareGPT `conversations`), config `batches` every sample written "
            "(`batch_N.jsonl`); `checkpoint.json`, `statistics.json` and `groups.jsonl` are the run's "
            "bookkeeping and its RL export (not data of a config).\n\n```python\nimport json\n"
            "from datasets import load_dataset\n"
            "ds = load_dataset(\"path/to/this/folder\", split=\"train\")\n"
            "text = tokenizer.apply_chat_template(ds[0][\"messages\"], tools=json.loads(ds[0][\"tools\"]), "
            "tokenize=False)\nhermes = load_dataset(\"path/to/this/folder\", \"hermes\", split=\"train\")\n```\n")


def write(run_dir: Path, run_name: str, *, finished: bool = False) -> None:
    """Write ``RUN_DIR/README.md`` (atomic) unless it already holds this card; ``finished``:
    with the sizes of the data files (:func:`header`).  Raises ``OSError``."""
    card = text(run_name, sizes_of(run_dir) if finished else None)
    try:
        if (run_dir / NAME).read_text(encoding="utf-8") == card:
            return
    except (OSError, UnicodeDecodeError):
        pass
    files.write_atomic(run_dir / NAME, card)
