"""Hugging Face models converted from a GGUF file for tests, made once per machine and kept
(beside :mod:`tests.venvs`' environments, ``~/.cache/hermesd-tests``): transformers dequantizes a
GGUF's weights in numpy on every ``from_pretrained(gguf_file=...)`` (about a minute on two cores
for SmolLM2-135M), while the same weights saved once with ``save_pretrained`` load in a second.

A kept model is used only when its marker says it was made from exactly this GGUF file (its
SHA-256) by this transformers release; otherwise it is made again.  The marker is written last and
the folder renamed into place, so a run killed half-way never leaves half a model to be reused.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from tests.venvs import cache_root

MARKER = "hermesd-made-from.txt"
"""The file in a kept model's folder naming the GGUF (SHA-256) and transformers release it was made from."""


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def hf_from_gguf(folder: Path, gguf_file: str) -> Path:
    """A folder holding the model and tokenizer of ``folder / gguf_file`` as transformers saves them
    (float32 weights, dequantized), for ``AutoModelForCausalLM.from_pretrained(path)``; made on first
    use.  Raises what transformers raises when the GGUF cannot be read."""
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    wanted = f"{_sha256(folder / gguf_file)} {gguf_file}\ntransformers {transformers.__version__}\n"
    where = cache_root() / f"hf-{Path(gguf_file).stem}"
    marker = where / MARKER
    if marker.is_file() and marker.read_text() == wanted:
        return where
    where.parent.mkdir(parents=True, exist_ok=True)
    making = Path(tempfile.mkdtemp(prefix=f".{where.name}-", dir=where.parent))
    try:
        AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf_file).save_pretrained(making)
        model = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=gguf_file)
        # transformers keeps the GGUF's quantizer as a marker on weights it already dequantized
        # (plain float tensors): saved without it, the copy loads as the full-precision model it is
        assert next(model.parameters()).dtype.is_floating_point
        model.is_quantized, model.hf_quantizer = False, None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(making)
        (making / MARKER).write_text(wanted)
        shutil.rmtree(where, ignore_errors=True)
        try:
            os.rename(making, where)
        except OSError:  # another run put its copy in place meanwhile
            if not (marker.is_file() and marker.read_text() == wanted):
                raise
    finally:
        shutil.rmtree(making, ignore_errors=True)
    return where
