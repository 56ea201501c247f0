"""A run folder read by Atropos' own SFT loader, ``environments/sft_loader_server.py``.

The loader is the file of the ``atroposlib`` 0.4.0 sdist from PyPI (the wheel does not hold it),
run as it is in its own interpreter against that release's ``atroposlib`` — ``SFTEnv`` built,
``setup()`` (``load_dataset(dataset_name, split="train")`` of the run folder), then
``get_next_item()`` and ``format_item()`` for every line, ``dataset_format: oai_format`` on the
column ``hermes_messages`` — with two changes to run it, neither to what it does:

* the sdist's copy imports ``OpenaiConfig``, which 0.4.0's ``atroposlib.envs.base`` had already
  renamed ``APIServerConfig``; NousResearch/atropos' later ``sft_loader_server.py`` imports
  ``APIServerConfig``, and so does the copy run here (a rename of that name, nothing else);
* the loader was written for transformers 4, whose ``apply_chat_template`` returned the token
  ids; 5 returns a ``BatchEncoding`` unless ``return_dict=False``, which the loader's tokenizer
  is given here.

``scripts/install-venv.sh`` puts the loader and what importing it needs beyond this venv (aiohttp,
markdown, wandb…) in ``$VENV/share/atropos``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_batch_consumers import _smollm2_tokenizer
from tests.test_batch_training import _run

ATROPOS = Path(sys.prefix) / "share" / "atropos"

LOADER_RUN = '''
import asyncio, json, sys, types
loader, site, run_dir, tokenizer = sys.argv[1:5]
sys.path.append(site)
source = open(loader).read().replace("OpenaiConfig", "APIServerConfig")
module = types.ModuleType("sft_loader_server")
module.__file__ = loader
sys.modules[module.__name__] = module
exec(compile(source, loader, "exec"), module.__dict__)
from atroposlib.envs.base import APIServerConfig


async def main():
    config = module.SFTConfig(tokenizer_name=tokenizer, dataset_name=run_dir, use_wandb=False,
                              dataset_format=module.DatasetFormat.OAI_FORMAT,
                              dataset_column_name="hermes_messages")
    server = APIServerConfig(model_name="unused", base_url="http://127.0.0.1:9/v1", api_key="unused")
    env = module.SFTEnv(config, [server], slurm=False, testing=True)
    template = env.tokenizer.apply_chat_template
    env.tokenizer.apply_chat_template = lambda chat, **kw: template(chat, return_dict=False, **kw)
    await env.setup()
    groups = []
    for _ in range(len(env.train)):
        item = await env.get_next_item()
        env.idx += 1
        group = await env.format_item(item)
        groups.append({"tokens": group["tokens"][0], "masks": group["masks"][0], "item": item})
    print(json.dumps(groups))

asyncio.run(main())
'''


def test_atroposs_sft_loader_reads_a_run_folder_with_the_tool_definitions_in_the_tokens(make_daemon, tmp_path):
    loader = ATROPOS / "sft_loader_server.py"
    if not loader.is_file():
        pytest.skip(f"Atropos' SFT loader is not at {loader}: bash scripts/install-venv.sh .venv '[test]'")
    run_dir = _run(make_daemon, tmp_path)
    tok = _smollm2_tokenizer()
    tok.save_pretrained(tmp_path / "tokenizer")  # the loader reads its tokenizer by name
    env = {"HOME": str(tmp_path), "HF_HOME": str(tmp_path / "hf"), "WANDB_MODE": "disabled", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", LOADER_RUN, str(loader), str(ATROPOS / "site"), str(run_dir),
                           str(tmp_path / "tokenizer")], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    groups = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(groups) == 2
    for group in groups:
        row, tokens, masks = group["item"], group["tokens"], group["masks"]
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
    assert sum(bool(m["tool_calls"]) for group in groups for m in group["item"]["messages"]) == 1
