"""A run folder read by Atropos' own code (``atroposlib`` 0.4.0 from PyPI).

Atropos' SFT loader (``environments/sft_loader_server.py`` of NousResearch/atropos) calls
``load_dataset(dataset_name, split="train")`` and, for ``dataset_format: oai_format``, renders
the column ``dataset_column_name`` with ``tokenizer.apply_chat_template(messages)`` — no
``tools=`` — masking everything but the assistant turns.  That file is not in the
``atroposlib`` wheel (the 0.4.0 sdist has it, 94 MB, and there it imports ``OpenaiConfig``,
which 0.4.0's ``atroposlib.envs.base`` no longer has: it cannot be imported against its own
release), so what is run here is the library's function for the same step,
``atroposlib.utils.tokenize_for_trainer.tokenize_for_trainer`` (``train_on_all_assistant_turns``:
the loader's ``mask_everything_but_assistant_answer``), on the folder's ``hermes_messages``
loaded with ``datasets`` as the loader loads it.  atroposlib is installed without its
dependencies (``pip install --no-deps atroposlib==0.4.0``, as ``scripts/install-venv.sh`` does
for the test extra): that module imports only numpy, transformers and openai.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.test_batch_consumers import _smollm2_tokenizer
from tests.test_batch_training import _run


class _Transformers4Tokenizer:
    """The tokenizer as atroposlib 0.4.0 calls it: with transformers 4, ``apply_chat_template``
    returned the token ids; 5 returns a ``BatchEncoding`` unless ``return_dict=False``."""

    def __init__(self, tok: Any):
        self._tok = tok

    def apply_chat_template(self, chat: list[dict[str, Any]], **kwargs: Any) -> list[int]:
        return self._tok.apply_chat_template(chat, return_dict=False, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tok, name)


def test_atropos_tokenizes_a_run_folder_with_the_tool_definitions_in_the_tokens(make_daemon, tmp_path):
    atropos = pytest.importorskip("atroposlib.utils.tokenize_for_trainer",
                                  reason="atroposlib is not installed: pip install --no-deps atroposlib==0.4.0")
    import datasets

    run_dir = _run(make_daemon, tmp_path)
    rows = datasets.load_dataset(str(run_dir), split="train", cache_dir=str(tmp_path / "hf"))  # as the loader does
    tok = _smollm2_tokenizer()
    for row in rows:
        out = atropos.tokenize_for_trainer(_Transformers4Tokenizer(tok), row["hermes_messages"],
                                           train_on_all_assistant_turns=True)
        tokens, masks = out["tokens"], out["masks"]
        assert len(tokens) == len(masks) and all(isinstance(t, int) for t in tokens)
        text = tok.decode(tokens)
        trained = tok.decode([t for t in masks if t != -100])
        for tool in json.loads(row["tools"]):  # the definitions reach the tokens, not the loss
            assert f'"name": "{tool["function"]["name"]}"' in text
            assert f'"name": "{tool["function"]["name"]}", "description"' not in trained
        answers = [m for m in row["messages"] if m["role"] == "assistant"]
        assert trained and answers[-1]["content"] in trained
        for message in answers:  # every reasoning trace and call is trained
            assert message["reasoning_content"] in trained
            for call in message["tool_calls"]:
                assert "<tool_call>" in trained and f'"name": "{call["function"]["name"]}"' in trained
        for result in (m["content"] for m in row["hermes_messages"] if m["role"] == "tool"):  # results: not trained
            assert "<tool_response>" in result and result in text and result not in trained
    assert sum(bool(m["tool_calls"]) for row in rows for m in row["messages"]) == 1
